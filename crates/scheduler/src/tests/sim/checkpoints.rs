//! The simulated engine's checkpoints, kept as the worker keeps them: taken 4 and 4 +
//! `SIM_UBATCH` tokens before a prompt's end (inside a chunk too: the worker reads such a
//! chunk in runs) and every `checkpoint_step` tokens within a read, bounded per sequence,
//! dropped by a cut, carried by parks and conversation saves, reported after the step.

use super::*;

/// The simulated engine's physical batch: its second checkpoint is 4 + this before a prompt's
/// end.
pub(super) const SIM_UBATCH: u32 = 64;

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
    /// The checkpoints of the step's chunk sequence that are due: the report to send.
    pub(super) fn take_checkpoint(&mut self, step: &Step) -> Vec<(SeqId, Vec<Checkpoint>)> {
        let Some(c) = &step.chunk else {
            return Vec::new();
        };
        if !self.checkpoints || self.s.engine_facts().trims_at_any_token {
            return Vec::new();
        }
        let prompt_len = self.prompts[&c.request].len() as u32;
        let near_end = [4 + SIM_UBATCH, 4]
            .into_iter()
            .filter_map(|before| prompt_len.checked_sub(before))
            .filter(|&at| at > 0 && at >= c.tokens.start && at < c.tokens.end);
        let step_len = self.checkpoint_step;
        let per_seq = self.checkpoints_per_seq;
        let list = self.ckpts.pool.entry(c.seq).or_default();
        let before = list.clone();
        for at in near_end {
            if list.last() != Some(&at) {
                list.push(at);
            }
        }
        let last = list.last().copied().unwrap_or(0);
        if c.tokens.end - last >= step_len {
            list.push(c.tokens.end);
        }
        while list.len() > per_seq {
            list.remove(0);
        }
        if *list == before {
            return Vec::new();
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
