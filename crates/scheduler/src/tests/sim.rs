//! A virtual-time driver that plays a fake engine: it executes every action on a model of the
//! engine's sequences (checking prefix keeps, KV continuity, park/restore round trips and
//! chunk boundaries), answers steps after their virtual duration (prompt-read and decode
//! speeds), and records what each client saw. `checks` asserts the invariants, `queries` reads
//! what happened, `arrival` builds a request.

use crate::ids::{RequestId, SeqId, TokenId};
use crate::lifecycle::Phase;
use crate::{
    Action, Checkpoint, ConversationId, EngineFacts, Event, FailKind, FinishReason, NewRequest,
    Outcome, ParkPlace, Refusal, Scheduler, SchedulerSettings, Step, StepOutput,
};
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::time::Duration;
use strata_protocol::pool::CellPool;

mod arrival;
mod checkpoints;
mod checks;
mod claims;
mod queries;
mod room;
mod step;

pub(crate) use room::RoomStats;

pub(crate) use arrival::{Arrival, facts, prompt};
pub(crate) use claims::ClaimStats;
pub(crate) use queries::{is_assign, is_deliver, is_park, is_release, is_restore};

pub(crate) const TURN: TokenId = 1;

pub(crate) fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// What one client saw.
#[derive(Debug, Clone, Default)]
pub(crate) struct Record {
    pub arrived: Duration,
    pub priority: i32,
    pub base_priority: i64,
    pub first_assign: Option<Duration>,
    pub first_token: Option<Duration>,
    pub delivered: Vec<TokenId>,
    pub ends: Vec<(Duration, Action)>,
    /// Refused at arrival (then it has no other end).
    pub refused: Option<(Duration, Refusal)>,
    pub chunks: Vec<Range<u32>>,
    pub lane_without_slot: bool,
}

impl Record {
    pub(crate) fn finish_reason(&self) -> Option<FinishReason> {
        self.ends.iter().find_map(|(_, a)| match a {
            Action::Finish { reason, .. } => Some(*reason),
            _ => None,
        })
    }
    pub(crate) fn ended_at(&self) -> Option<Duration> {
        self.ends
            .first()
            .map(|(t, _)| *t)
            .or(self.refused.as_ref().map(|(t, _)| *t))
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Scripted {
    Event(Event),
    Arrival(NewRequest),
    KillEngine,
    /// A next turn: `of`'s prompt and output so far, then `extra` new tokens.
    FollowUp {
        id: RequestId,
        of: RequestId,
        extra: Vec<TokenId>,
        priority: i32,
    },
}

/// The fake engine plus the driver.
pub(crate) struct Sim {
    pub s: Scheduler,
    pub now: Duration,
    /// Prompt tokens read per virtual second.
    pub read_tps: f64,
    /// Seconds per decode step (one token per decoding sequence).
    pub decode_step_secs: f64,
    /// Seconds an engine start takes.
    pub start_secs: f64,
    /// The next this many start attempts fail.
    pub failing_starts: u32,
    /// The facts the next successful start hands over (`None`: the facts in force).
    pub next_facts: Option<EngineFacts>,
    /// The engine keeps checkpoints (where it cannot trim anywhere): near each prompt's end
    /// and every `checkpoint_step` tokens within a read, `checkpoints_per_seq` at most a
    /// sequence, and reports them as the worker does (sim/checkpoints.rs).
    pub checkpoints: bool,
    pub checkpoint_step: u32,
    pub checkpoints_per_seq: usize,
    ckpts: checkpoints::SimCheckpoints,
    seqs: HashMap<SeqId, Vec<TokenId>>,
    seq_owner: HashMap<SeqId, RequestId>,
    parked: HashMap<RequestId, (ParkPlace, Vec<TokenId>)>,
    host: HashMap<ConversationId, Vec<TokenId>>,
    prompts: HashMap<RequestId, Vec<TokenId>>,
    /// Output length at which the request stops by itself.
    gen_len: HashMap<RequestId, u32>,
    sampled: HashMap<RequestId, Vec<TokenId>>,
    read_marks: HashMap<RequestId, Vec<bool>>,
    pub prefix_losses: u64,
    pending_step: Option<(Duration, Step)>,
    pending_start: Option<Duration>,
    script: BTreeMap<(Duration, u64), Scripted>,
    script_n: u64,
    pub records: BTreeMap<RequestId, Record>,
    pub log: Vec<(Duration, Action)>,
    pub diagnostics: Vec<String>,
    pub steps: u64,
    pub max_yields_seen: u32,
    last_yields: HashMap<RequestId, u32>,
    /// The engine's cells, moved as the worker moves them (`CellPool`, shared prefixes and
    /// all) and checked by the worker's own room rules: a command the worker would refuse
    /// fails the run.
    pool: CellPool,
    pub room: RoomStats,
    /// The sequence a conversation was just loaded into, and its length (an `Assign` that
    /// keeps less is a restore of a longer conversation).
    last_loaded: Option<(SeqId, u32)>,
    /// R7's outlook after the last event, checked at the next (`claims.rs`).
    claim: Option<claims::Claim>,
    pub claims: claims::ClaimStats,
}

impl Sim {
    pub(crate) fn new(settings: SchedulerSettings, facts: EngineFacts) -> Self {
        let s = Scheduler::new(settings, facts.clone()).expect("valid test config");
        Self {
            s,
            now: Duration::ZERO,
            read_tps: 1000.0,
            decode_step_secs: 0.05,
            start_secs: 2.0,
            failing_starts: 0,
            next_facts: None,
            checkpoints: false,
            checkpoint_step: u32::MAX,
            checkpoints_per_seq: 32,
            ckpts: checkpoints::SimCheckpoints::default(),
            seqs: HashMap::new(),
            seq_owner: HashMap::new(),
            parked: HashMap::new(),
            host: HashMap::new(),
            prompts: HashMap::new(),
            gen_len: HashMap::new(),
            sampled: HashMap::new(),
            read_marks: HashMap::new(),
            prefix_losses: 0,
            pending_step: None,
            pending_start: None,
            script: BTreeMap::new(),
            script_n: 0,
            records: BTreeMap::new(),
            log: Vec::new(),
            diagnostics: Vec::new(),
            steps: 0,
            max_yields_seen: 0,
            last_yields: HashMap::new(),
            pool: CellPool::new(facts.sequences),
            room: RoomStats::default(),
            last_loaded: None,
            claim: None,
            claims: claims::ClaimStats::default(),
        }
    }

    fn schedule(&mut self, at: Duration, what: Scripted) {
        self.script_n += 1;
        self.script.insert((at, self.script_n), what);
    }

    /// A request arriving as `arrival` describes.
    pub(crate) fn arrive(&mut self, arrival: Arrival) {
        let rid = RequestId(arrival.id);
        self.prompts.insert(rid, arrival.prompt.clone());
        self.gen_len.insert(rid, arrival.output_len.max(1));
        self.schedule(
            secs(arrival.at_secs),
            Scripted::Arrival(NewRequest {
                id: rid,
                prompt: arrival.prompt,
                priority: arrival.priority,
                priority_given: arrival.priority_given,
                max_tokens: arrival.max_tokens,
            }),
        );
    }

    /// The next turn of `of`, arriving at `at`, that stops after `output_len` tokens.
    pub(crate) fn follow_up(
        &mut self,
        at: f64,
        id: u64,
        of: u64,
        extra: Vec<TokenId>,
        priority: i32,
        output_len: u32,
    ) {
        let rid = RequestId(id);
        self.gen_len.insert(rid, output_len.max(1));
        let what = Scripted::FollowUp {
            id: rid,
            of: RequestId(of),
            extra,
            priority,
        };
        self.schedule(secs(at), what);
    }

    pub(crate) fn cancel_at(&mut self, at: f64, id: u64) {
        self.schedule(secs(at), Scripted::Event(Event::Cancelled(RequestId(id))));
    }

    pub(crate) fn kill_engine_at(&mut self, at: f64) {
        self.schedule(secs(at), Scripted::KillEngine);
    }

    pub(crate) fn event_at(&mut self, at: f64, e: Event) {
        self.schedule(secs(at), Scripted::Event(e));
    }

    /// Runs until nothing is scheduled and no step or start is pending, or `limit` secs.
    pub(crate) fn run(&mut self, limit: f64) {
        let limit = secs(limit);
        loop {
            let next_script = self.script.keys().next().map(|k| k.0);
            let next_step = self.pending_step.as_ref().map(|(t, _)| *t);
            let next = [next_script, next_step, self.pending_start]
                .into_iter()
                .flatten()
                .min();
            let Some(t) = next else { break };
            if t > limit {
                break;
            }
            self.now = t.max(self.now);
            if next_step == Some(t) {
                let (_, step) = self.pending_step.take().unwrap();
                let outputs = self.execute_step(&step);
                let reports = self.take_checkpoint(&step);
                if !reports.is_empty() {
                    let out = self.s.handle(Event::CheckpointsChanged(reports), self.now);
                    self.diagnostics.extend(out.diagnostics.iter().cloned());
                    assert!(
                        out.actions.is_empty(),
                        "reported checkpoints decided something"
                    );
                }
                self.feed(Event::StepDone(outputs));
            } else if self.pending_start == Some(t) {
                self.pending_start = None;
                if self.failing_starts > 0 {
                    self.failing_starts -= 1;
                    self.feed(Event::EngineStartFailed {
                        stderr_tail: "CUDA error: out of memory".into(),
                    });
                } else {
                    let f = self
                        .next_facts
                        .take()
                        .unwrap_or_else(|| self.s.engine_facts().clone());
                    self.pool = CellPool::new(f.sequences);
                    self.feed(Event::EngineReady(f));
                }
            } else {
                let key = *self.script.keys().next().unwrap();
                let what = self.script.remove(&key).unwrap();
                match what {
                    Scripted::Event(e) => self.feed(e),
                    Scripted::Arrival(nr) => self.admit(nr),
                    Scripted::FollowUp {
                        id,
                        of,
                        extra,
                        priority,
                    } => {
                        let mut p = self.prompts[&of].clone();
                        p.extend(self.sampled.get(&of).cloned().unwrap_or_default());
                        p.extend(extra);
                        self.prompts.insert(id, p.clone());
                        self.admit(NewRequest {
                            id,
                            prompt: p,
                            priority,
                            priority_given: true,
                            max_tokens: None,
                        });
                    }
                    Scripted::KillEngine => {
                        // nothing runs while a start is pending or after the starts failed
                        // (R10): there is no engine to kill
                        if self.pending_start.is_none() && self.s.engine_failed().is_none() {
                            self.reset_engine();
                            self.feed(Event::EngineDied);
                        }
                    }
                }
            }
        }
    }

    fn reset_engine(&mut self) {
        self.pending_step = None;
        self.seqs.clear();
        self.ckpts.pool.clear();
        self.seq_owner.clear();
        self.pool = CellPool::new(self.s.engine_facts().sequences);
        // engine-side state is gone; host RAM (parks, conversation cache) is the service's
        self.parked
            .retain(|_, (place, _)| *place == ParkPlace::HostRam);
    }

    /// Hands one event to the scheduler and executes the actions.
    pub(crate) fn feed(&mut self, e: Event) {
        if let Event::RestartRequested = e {
            self.reset_engine();
        }
        let claim = self.claim.take();
        let step = matches!(e, Event::StepDone(_));
        let reranks = matches!(e, Event::SettingsChanged(_) | Event::Reprioritised { .. });
        let out: Outcome = self.s.handle(e, self.now);
        self.execute(out);
        self.check_claim(claim, step, reranks);
    }

    /// An arrival now: admitted, or refused (recorded as its end; a duplicate id is the
    /// caller's bug and leaves the live request's record alone).
    pub(crate) fn admit(&mut self, nr: NewRequest) {
        let id = nr.id;
        let duplicate = self.s.requests.contains_key(&id);
        if !duplicate {
            self.records.entry(id).or_default().arrived = self.now;
        }
        match self.s.admit(nr, self.now) {
            Ok(out) => {
                if let Some(r) = self.s.requests.get(&id) {
                    let boost = i64::from(self.s.settings().solo_priority && r.boost_eligible);
                    let rec = self.records.entry(id).or_default();
                    rec.priority = r.priority;
                    rec.base_priority = i64::from(r.priority) + boost;
                }
                self.execute(out);
            }
            Err(refused) => {
                if !duplicate {
                    self.records.entry(id).or_default().refused = Some((self.now, refused.refusal));
                }
                self.execute(refused.outcome);
            }
        }
    }

    fn execute(&mut self, out: Outcome) {
        self.diagnostics.extend(out.diagnostics.iter().cloned());
        for a in out.actions {
            self.apply(a);
        }
        self.check_live();
        self.claim = self.claim_now();
    }

    fn apply(&mut self, a: Action) {
        let now = self.now;
        self.log.push((now, a.clone()));
        self.move_cells(&a);
        self.move_checkpoints(&a);
        match &a {
            Action::Finish { request, .. } | Action::Fail { request, .. } => {
                let rec = self.records.entry(*request).or_default();
                rec.ends.push((now, a.clone()));
                if let Action::Finish { output_tokens, .. } = &a {
                    assert_eq!(
                        *output_tokens as usize,
                        rec.delivered.len(),
                        "{request}: output_tokens differs from tokens delivered"
                    );
                }
            }
            Action::Assign {
                request,
                seq,
                keep_tokens,
            } => {
                let p = &self.prompts[request];
                let content = self.seqs.entry(*seq).or_default();
                let keep = *keep_tokens as usize;
                assert!(
                    keep <= content.len(),
                    "{request}: keeps more than {seq} holds"
                );
                assert_eq!(
                    &content[..keep],
                    &p[..keep],
                    "{request}: kept cells are not its prompt prefix"
                );
                let f = self.s.engine_facts();
                let cuts = f.trims_at_any_token
                    || keep == 0
                    || content.len() - keep <= f.rewindable_tokens as usize
                    || self.ckpts.at(*seq, keep as u32);
                assert!(cuts, "{request}: keep {keep} of {seq} is not a checkpoint");
                assert!(keep < p.len(), "{request}: nothing left to read");
                content.truncate(keep);
                self.seq_owner.insert(*seq, *request);
                let rec = self.records.entry(*request).or_default();
                rec.first_assign.get_or_insert(now);
            }
            Action::RestoreConversation {
                conversation,
                into_seq,
                ..
            } => {
                assert!(
                    !self.seq_owner.contains_key(into_seq)
                        && self.seqs.get(into_seq).is_none_or(Vec::is_empty),
                    "a conversation restored over {into_seq}'s content"
                );
                let c = self
                    .host
                    .remove(conversation)
                    .expect("restore of a conversation the cache does not hold");
                self.seqs.insert(*into_seq, c);
            }
            Action::EvictConversation { seq, to_cache } => {
                assert!(
                    !self.seq_owner.contains_key(seq),
                    "{seq} evicted while a request owns it"
                );
                let c = self.seqs.remove(seq).unwrap_or_default();
                if let Some(id) = to_cache {
                    self.host.insert(*id, c);
                }
            }
            Action::DropConversation { conversation } => {
                assert!(self.host.remove(conversation).is_some());
            }
            Action::Park {
                request,
                from_seq,
                to,
            } => {
                assert_eq!(
                    self.seq_owner.get(from_seq),
                    Some(request),
                    "{request}: parked from {from_seq}, which it does not own"
                );
                match (self.parked.remove(request), to) {
                    // parked in its own sequence: nothing moves
                    (None, ParkPlace::Pool(s)) => {
                        assert_eq!(s, from_seq, "{request}: parked in another sequence");
                        self.parked.insert(*request, (*to, Vec::new()));
                    }
                    // saved to host RAM, from running or from its pool park
                    (None | Some((ParkPlace::Pool(_), _)), ParkPlace::HostRam) => {
                        self.seq_owner.remove(from_seq);
                        let content = self.seqs.remove(from_seq).unwrap_or_default();
                        self.parked.insert(*request, (*to, content));
                    }
                    (other, _) => panic!("{request}: parked to {to:?} but was at {other:?}"),
                }
            }
            Action::Restore {
                request,
                from,
                into_seq,
            } => {
                let (place, content) = self
                    .parked
                    .remove(request)
                    .expect("restore of a request that is not parked");
                assert_eq!(place, *from, "{request}: restored from the wrong place");
                match place {
                    ParkPlace::Pool(s) => {
                        assert_eq!(s, *into_seq, "{request}: a pool park moves nowhere");
                        assert_eq!(self.seq_owner.get(into_seq), Some(request));
                    }
                    ParkPlace::HostRam => {
                        assert!(
                            !self.seq_owner.contains_key(into_seq),
                            "{request}: restored into {into_seq}, which another request owns"
                        );
                        assert!(
                            self.seqs.get(into_seq).is_none_or(Vec::is_empty),
                            "{request}: restored into {into_seq}, which holds a conversation"
                        );
                        self.seqs.insert(*into_seq, content);
                        self.seq_owner.insert(*into_seq, *request);
                    }
                }
            }
            Action::DropParked { request, place } => {
                assert_eq!(
                    *place,
                    ParkPlace::HostRam,
                    "a pool park is released, not dropped"
                );
                self.parked.remove(request);
            }
            Action::CopyPrefix {
                from, to, tokens, ..
            } => {
                assert!(
                    !self.seq_owner.contains_key(to),
                    "prefix copied onto {to}, which a request owns"
                );
                assert!(
                    self.seqs.get(to).is_none_or(Vec::is_empty),
                    "prefix copied onto {to}, which holds a conversation"
                );
                let source = self.seqs.get(from).cloned().unwrap_or_default();
                assert!(
                    *tokens as usize <= source.len(),
                    "copies {tokens} of {from}, which holds {}",
                    source.len()
                );
                self.seqs.insert(*to, source[..*tokens as usize].to_vec());
            }
            Action::Release {
                request,
                seq,
                keep_as_conversation,
            } => {
                assert_eq!(self.seq_owner.get(seq), Some(request));
                self.seq_owner.remove(seq);
                // a request parked in its sequence ends there too (cancelled)
                if let Some((ParkPlace::Pool(s), _)) = self.parked.get(request) {
                    assert_eq!(s, seq);
                    self.parked.remove(request);
                }
                if !keep_as_conversation {
                    self.seqs.remove(seq);
                }
            }
            Action::Step(step) => {
                assert!(self.pending_step.is_none(), "two steps outstanding");
                let mut dur = 0.0;
                if let Some(c) = &step.chunk {
                    dur += f64::from(c.tokens.end - c.tokens.start) / self.read_tps;
                    let slot_holder = self.seq_owner.get(&c.seq) == Some(&c.request);
                    let rec = self.records.entry(c.request).or_default();
                    rec.chunks.push(c.tokens.clone());
                    if !slot_holder {
                        rec.lane_without_slot = true;
                    }
                }
                if !step.decode.is_empty() {
                    dur += self.decode_step_secs;
                }
                self.steps += 1;
                self.pending_step = Some((now + secs(dur.max(1e-6)), step.clone()));
            }
            Action::Deliver {
                request,
                token,
                index,
            } => {
                let rec = self.records.entry(*request).or_default();
                assert_eq!(
                    *index as usize,
                    rec.delivered.len(),
                    "{request}: token out of order"
                );
                rec.delivered.push(*token);
                rec.first_token.get_or_insert(now);
                let sampled = &self.sampled[request];
                assert_eq!(
                    sampled[*index as usize], *token,
                    "{request}: wrong token delivered"
                );
            }
            Action::RestartEngine { delay_secs, .. } => {
                self.reset_engine();
                self.pending_start = Some(now + secs(delay_secs + self.start_secs));
            }
        }
    }
}
