//! One scenario per rule (R1-R12) and per precedence line, named after what it proves, in one
//! file per rule.
//! Virtual engine: 1,000 prompt tokens/s, 0.05 s per decode step, chunks of 256 unless said.

use super::sim::{Arrival, facts, is_assign, is_deliver, is_park, is_release, is_restore, prompt};
use super::{Sim, batch, solo, with};
use crate::ids::{RequestId, SeqId};
use crate::{
    Action, ConversationId, Event, FailKind, FinishReason, GiveWay, MaxTokensOverContext,
    ParkPlace, PriorityOrder, PriorityRange, Refusal, SchedulerSettings, resolve_priority,
};

fn p(len: u32, unique: u32) -> Vec<i32> {
    prompt(unique, 0, len, unique)
}

fn assigned_seq(sim: &Sim, id: u64) -> (SeqId, u32) {
    sim.log
        .iter()
        .find_map(|(_, a)| match a {
            Action::Assign {
                request,
                seq,
                keep_tokens,
            } if request.0 == id => Some((*seq, *keep_tokens)),
            _ => None,
        })
        .expect("never assigned")
}

mod conversations;
mod held_kv_aging;
mod park_causes;
mod park_places;
mod precedence;
mod prefix_sources;
mod r10_engine_death;
mod r11_limits;
mod r12_live_rollback;
mod r1_slot_admission;
mod r2_read_lane;
mod r3_give_way;
mod r4_no_regrab;
mod r5_no_deadlock;
mod r6_batch_pauses_nothing;
mod r7_solo_preemption;
mod r8_pause_loses_nothing;
mod r8_request_failed;
mod r9_cancellation;
mod regressions;
mod room;
