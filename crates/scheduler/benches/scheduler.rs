//! Scheduler decision cost at scale: one `handle(StepDone)` (a step boundary: release, admit
//! with prefix matching, lane, compose) with every slot holding a long conversation and many
//! waiting prompts sharing prefixes with them.
//!
//! Run: `cargo bench -p strata-scheduler --bench scheduler -- --warm-up-time 1 --measurement-time 3`.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;
use strata_scheduler::ids::{RequestId, TokenId};
use strata_scheduler::{
    Action, EngineFacts, Event, FinishReason, NewRequest, Scheduler, SchedulerSettings, SlotStatus,
    StepOutput,
};

/// `len` tokens: the first `shared` from `family`'s system prompt, the rest unique.
fn prompt(family: u32, shared: u32, len: u32, unique: u32) -> Vec<TokenId> {
    (0..len)
        .map(|i| {
            if i < shared {
                1000 + ((family * 7919 + i * 31) % 20000) as TokenId
            } else {
                30000 + ((unique * 104_729 + i * 17) % 20000) as TokenId
            }
        })
        .collect()
}

/// Answers every step at once until every slot decodes and nothing waits.
fn drive_to_decoding(s: &mut Scheduler, mut out: Vec<Action>, now: &mut Duration) {
    loop {
        let Some(step) = out.iter().find_map(|a| match a {
            Action::Step(st) => Some(st.clone()),
            _ => None,
        }) else {
            return;
        };
        if step.chunk.is_none() && s.snapshot(*now).waiting.is_empty() {
            return;
        }
        let mut outputs: Vec<StepOutput> = step
            .decode
            .iter()
            .map(|(r, _)| StepOutput {
                request: *r,
                token: Some(7),
                finished: None,
            })
            .collect();
        if let Some(c) = &step.chunk
            && c.is_last
        {
            outputs.push(StepOutput {
                request: c.request,
                token: Some(7),
                finished: None,
            });
        }
        *now += Duration::from_millis(100);
        out = s.handle(Event::StepDone(outputs), *now).actions;
    }
}

/// A scheduler with `slots` decoding requests of `len` tokens and `waiting` more queued, all
/// sharing `shared` tokens of one of `slots` system prompts; plus the next StepDone, in which
/// request 0 finishes, so its slot is freed and refilled by the waiting request of highest
/// priority, which shares request 0's system prompt (kept by prefix).
fn setup(slots: u32, waiting: u32, len: u32, shared: u32) -> (Scheduler, Event, Duration) {
    let facts = EngineFacts {
        parallel: slots,
        sequences: (slots + 1).max(16),
        kv_cells_total: (slots + 2) * (len + 1024),
        context_tokens: len + 1024,
        chunk_tokens: 8192,
        trims_at_any_token: true,
        rewindable_tokens: u32::MAX,
    };
    let settings = SchedulerSettings {
        queue_max: waiting + slots + 1,
        ..SchedulerSettings::default()
    };
    let mut s = Scheduler::new(settings, facts).expect("config");
    let mut now = Duration::ZERO;
    let mut out = Vec::new();
    for i in 0..slots {
        let o = s
            .admit(
                NewRequest {
                    id: RequestId(u64::from(i)),
                    prompt: prompt(i, shared, len, i),
                    priority: 0,
                    priority_given: true,
                    max_tokens: Some(1000),
                },
                now,
            )
            .expect("admitted");
        out.extend(o.actions);
    }
    drive_to_decoding(&mut s, out, &mut now);
    for j in 0..waiting {
        let id = 1000 + u64::from(j);
        s.admit(
            NewRequest {
                id: RequestId(id),
                // the first to be admitted (priority 2, j = 2) shares request 0's system prompt
                prompt: prompt((j + slots - 2) % slots, shared, len, 1000 + j),
                priority: (j % 3) as i32,
                priority_given: true,
                max_tokens: Some(1000),
            },
            now,
        )
        .expect("admitted");
    }
    let snap = s.snapshot(now);
    assert_eq!(snap.waiting.len(), waiting as usize);
    assert!(snap.slots.iter().all(|v| v.state == SlotStatus::Decoding));
    let outputs = snap
        .slots
        .iter()
        .map(|v| StepOutput {
            request: v.request_id.expect("busy"),
            token: Some(7),
            finished: (v.request_id == Some(RequestId(0))).then_some(FinishReason::Stop),
        })
        .collect();
    let ev = Event::StepDone(outputs);
    let then = now + Duration::from_millis(100);
    // the refill keeps the shared system prompt
    let trial = s.clone().handle(ev.clone(), then);
    assert!(trial.actions.iter().any(|a| matches!(
        a,
        Action::Assign { request, keep_tokens, .. }
            if *request == RequestId(1002) && *keep_tokens == shared
    )));
    (s, ev, then)
}

fn bench(c: &mut Criterion) {
    for (name, slots, waiting, len, shared) in [
        ("decision_8_slots_50k_16_waiting_50k", 8, 16, 50_000, 40_000),
        (
            "decision_64_slots_8k_1000_waiting_8k",
            64,
            1000,
            8_000,
            6_000,
        ),
    ] {
        let (s, ev, now) = setup(slots, waiting, len, shared);
        c.bench_function(name, |b| {
            b.iter_batched(
                || (s.clone(), ev.clone()),
                |(mut s, ev)| {
                    let out = s.handle(ev, now);
                    black_box((s, out))
                },
                BatchSize::LargeInput,
            )
        });
        // a plain boundary: every slot decodes, nothing ends
        let Event::StepDone(mut outs) = ev.clone() else {
            unreachable!()
        };
        for o in &mut outs {
            o.finished = None;
        }
        let plain = Event::StepDone(outs);
        c.bench_function(&format!("{name}_nothing_ends"), |b| {
            b.iter_batched(
                || (s.clone(), plain.clone()),
                |(mut s, ev)| {
                    let out = s.handle(ev, now);
                    black_box((s, out))
                },
                BatchSize::LargeInput,
            )
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
