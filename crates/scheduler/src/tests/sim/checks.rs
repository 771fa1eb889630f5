//! The invariants the simulated engine checks while it runs and at the end.

use super::*;

impl Sim {
    /// Invariants after every event.
    pub(super) fn check_live(&mut self) {
        let ym = self.s.settings().yields_max;
        for r in self.s.requests.values() {
            // a give-way happens only below the yields_max in force then
            let before = self.last_yields.insert(r.id, r.yields).unwrap_or(0);
            assert!(
                r.yields <= before || r.yields <= ym,
                "{}: {} yields > yields_max {ym}",
                r.id,
                r.yields
            );
            self.max_yields_seen = self.max_yields_seen.max(r.yields);
        }
        assert!(
            self.s.cells_used() <= u64::from(self.s.engine_facts().kv_cells_total),
            "KV cells over budget at {:?}: {} used of {}; last actions {:#?}",
            self.now,
            self.s.cells_used(),
            self.s.engine_facts().kv_cells_total,
            &self.log[self.log.len().saturating_sub(8)..]
        );
        // the scheduler's pool holds what the engine's sequences hold (a pending step's
        // tokens join both when it is done)
        if self.pending_step.is_none() {
            self.check_pool();
            for seq in 0..self.s.engine_facts().sequences {
                let seq = SeqId(seq);
                let engine = self.seqs.get(&seq).map_or(0, Vec::len);
                assert_eq!(
                    self.s.pool.len(seq) as usize,
                    engine,
                    "{seq}: the scheduler counts {} tokens, the engine holds {engine}",
                    self.s.pool.len(seq)
                );
            }
        }
        if let Some(l) = self.s.lane {
            let r = &self.s.requests[&l];
            assert!(
                matches!(r.phase, Phase::Reading { .. }),
                "lane to a non-reader"
            );
        }
        // progress: work exists, so a step or an engine start is pending
        if self.s.has_work() && self.pending_step.is_none() && self.pending_start.is_none() {
            panic!(
                "no progress at {:?}: work exists but no step is outstanding\n{:#?}",
                self.now,
                self.s.snapshot(self.now)
            );
        }
    }

    /// End-of-run invariants: every request ended once, tokens delivered equal tokens
    /// accepted, queues, parking and reservations empty, no prefix lost.
    pub(crate) fn check_end(&self) {
        self.check_end_losing(0);
    }

    /// [`Sim::check_end`] for a run where the engine failed requests that lost `lost`
    /// processed prompt tokens (the scheduler's counter; the sim's own re-read count stays 0).
    pub(crate) fn check_end_losing(&self, lost: u64) {
        for (id, rec) in &self.records {
            let ends = rec.ends.len() + usize::from(rec.refused.is_some());
            assert_eq!(
                ends, 1,
                "{id} ended {ends} times: {:?} {:?}",
                rec.ends, rec.refused
            );
            assert!(!rec.lane_without_slot, "{id} read without holding a slot");
            if let Some(Action::Finish { reason, .. }) = rec.ends.first().map(|(_, a)| a)
                && *reason == FinishReason::Stop
            {
                assert_eq!(rec.delivered.len() as u32, self.gen_len[id]);
            }
        }
        for id in self.prompts.keys() {
            assert!(self.records.contains_key(id), "{id} never heard of");
        }
        assert!(!self.s.has_work(), "work left at the end");
        let snap = self.s.snapshot(self.now);
        assert!(snap.waiting.is_empty() && snap.parked.is_empty());
        assert!(snap.slots.iter().all(|s| s.request_id.is_none()));
        assert!(self.parked.is_empty(), "engine still holds parked state");
        assert_eq!(self.prefix_losses, 0, "prompt tokens read twice");
        assert_eq!(snap.counters.processed_prefix_losses, lost);
        assert!(
            self.diagnostics.is_empty(),
            "diagnostics: {:?}",
            self.diagnostics
        );
    }
}

impl Sim {
    /// The aging bound for parked requests, from the log: while P is parked (from its park to
    /// its restore), every request X that takes a slot must rank at least as high as P then,
    /// by the effective priorities SCHEDULING.md defines (class + one per whole aging interval
    /// since the request's anchor: P's park; X's arrival or its own last park). So once P has
    /// aged past every class above its own, nobody who came later takes a slot ahead of it:
    /// P waits only for the requests that held a slot or outranked it. A solo give-way's
    /// target is exempt (R3 picks the best candidate that fits, past one that does not).
    /// Valid while settings and priorities do not change during the run.
    pub(crate) fn check_parked_aging(&self) {
        let interval = self.s.settings().aging_interval_secs;
        let eff = |base: i64, anchor: Duration, t: Duration| {
            let aged = if interval > 0.0 {
                (t.saturating_sub(anchor).as_secs_f64() / interval).floor() as i64
            } else {
                0
            };
            base + aged
        };
        let mut anchor: HashMap<RequestId, Duration> = self
            .records
            .iter()
            .map(|(id, r)| (*id, r.arrived))
            .collect();
        // P -> its park time, while parked
        let mut parked: HashMap<RequestId, Duration> = HashMap::new();
        let delivered_before = |id: RequestId, i: usize| {
            self.log[..i]
                .iter()
                .any(|(_, a)| matches!(a, Action::Deliver { request, .. } if *request == id))
        };
        for (i, (t, a)) in self.log.iter().enumerate() {
            match a {
                // a move from its sequence to host RAM is no new park: its anchor stays
                Action::Park { request, .. } if !parked.contains_key(request) => {
                    parked.insert(*request, *t);
                    anchor.insert(*request, *t);
                }
                Action::Restore { request, .. } | Action::Assign { request, .. } => {
                    parked.remove(request);
                    let x = *request;
                    // a solo give-way: the reader parked at this instant, just before
                    let give_way_target = self.s.engine_facts().parallel == 1
                        && i > 0
                        && self.log[i - 1].0 == *t
                        && matches!(&self.log[i - 1].1, Action::Park { request, .. }
                            if !delivered_before(*request, i - 1));
                    if give_way_target {
                        continue;
                    }
                    let Some(rx) = self.records.get(&x) else {
                        continue;
                    };
                    let x_eff = eff(rx.base_priority, anchor[&x], *t);
                    for (p, since) in &parked {
                        let p_eff = eff(self.records[p].base_priority, *since, *t);
                        assert!(
                            x_eff >= p_eff,
                            "{x} (effective {x_eff}) took a slot at {:.3} s while {p}, parked \
                             since {:.3} s, ranked higher (effective {p_eff})",
                            t.as_secs_f64(),
                            since.as_secs_f64()
                        );
                    }
                }
                Action::Finish { request, .. }
                | Action::Fail { request, .. }
                | Action::DropParked { request, .. } => {
                    parked.remove(request);
                }
                _ => {}
            }
        }
    }
}
