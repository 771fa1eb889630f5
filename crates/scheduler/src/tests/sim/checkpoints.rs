//! The simulated engine's checkpoints, kept as the worker keeps them: taken after a chunk (at
//! the end of a prompt, and every `checkpoint_step` tokens within one), bounded per sequence,
//! dropped by a cut, carried by parks and conversation saves, reported after the step.

use super::*;

#[derive(Debug, Default)]
pub(super) struct SimCheckpoints {
    /// Positions per sequence in the pool.
    pub pool: HashMap<SeqId, Vec<u32>>,
    parked: HashMap<RequestId, Vec<u32>>,
    host: HashMap<ConversationId, Vec<u32>>,
}

impl SimCheckpoints {
    pub(super) fn at(&self, seq: SeqId, tokens: u32) -> bool {
        self.pool.get(&seq).is_some_and(|l| l.contains(&tokens))
    }
}

impl Sim {
    /// A checkpoint of the step's chunk sequence, if one is due: the report to send.
    pub(super) fn take_checkpoint(&mut self, step: &Step) -> Vec<(SeqId, Vec<Checkpoint>)> {
        let Some(c) = &step.chunk else {
            return Vec::new();
        };
        if !self.checkpoints || self.s.engine_facts().trims_at_any_token {
            return Vec::new();
        }
        let held = self.seqs.get(&c.seq).map_or(0, |s| s.len() as u32);
        let list = self.ckpts.pool.entry(c.seq).or_default();
        let last = list.last().copied().unwrap_or(0);
        if !(c.is_last || held - last >= self.checkpoint_step) || held == last {
            return Vec::new();
        }
        list.push(held);
        if list.len() > self.checkpoints_per_seq {
            list.remove(0);
        }
        // the simulated bytes: one per token held
        let report = list.iter().map(|&p| Checkpoint::new(p, u64::from(p)));
        vec![(c.seq, report.collect())]
    }

    /// What an action does to the checkpoints (as the worker's commands do).
    pub(super) fn move_checkpoints(&mut self, a: &Action) {
        let k = &mut self.ckpts;
        match a {
            Action::Assign {
                seq, keep_tokens, ..
            } => {
                if let Some(list) = k.pool.get_mut(seq) {
                    list.retain(|p| p <= keep_tokens);
                }
            }
            Action::RestoreConversation {
                conversation,
                into_seq,
                ..
            } => {
                let list = k.host.remove(conversation).unwrap_or_default();
                k.pool.insert(*into_seq, list);
            }
            Action::EvictConversation { seq, to_cache } => {
                let list = k.pool.remove(seq).unwrap_or_default();
                if let Some(id) = to_cache {
                    k.host.insert(*id, list);
                }
            }
            Action::DropConversation { conversation } => {
                k.host.remove(conversation);
            }
            Action::Park {
                request,
                from_seq,
                to: ParkPlace::HostRam,
            } => {
                let list = k.pool.remove(from_seq).unwrap_or_default();
                k.parked.insert(*request, list);
            }
            Action::Restore {
                request,
                from: ParkPlace::HostRam,
                into_seq,
            } => {
                let list = k.parked.remove(request).unwrap_or_default();
                k.pool.insert(*into_seq, list);
            }
            Action::DropParked { request, .. } => {
                k.parked.remove(request);
            }
            Action::CopyPrefix { to, .. } => {
                k.pool.remove(to);
            }
            Action::Release {
                seq,
                keep_as_conversation: false,
                ..
            } => {
                k.pool.remove(seq);
            }
            _ => {}
        }
    }
}
