//! The engine's cells in the simulated engine: every action moves them as the worker does
//! (`src/engine_worker/worker.rs`), with the same `CellPool` and the same room rules
//! (`room_for`, `room_replacing`), including the transients: a conversation or a parked state
//! loaded whole, and the step ahead the host sends after every decode-only step. A command the
//! worker would refuse fails the run at once, naming it; a step ahead that would not fit is
//! counted (the worker answers it "not run", which is harmless).

use super::*;

/// What the room model saw over a run (summed over workloads for coverage).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RoomStats {
    /// Steps ahead the host would send (after each decode-only step), and those that would
    /// not fit and be answered "not run".
    pub aheads: u64,
    pub aheads_not_run: u64,
    /// Steps after which the pool had at most 3 cells free.
    pub full_pool_steps: u64,
    /// Host-RAM conversations loaded for a request that keeps less than all of them.
    pub longer_restores: u64,
    /// Parked requests restored from host RAM.
    pub host_restores: u64,
}

/// Cells a step's room check counts: its chunk and a token per decode.
fn step_cells(step: &Step) -> u64 {
    step.chunk
        .as_ref()
        .map_or(0, |c| u64::from(c.tokens.end - c.tokens.start))
        + step.decode.len() as u64
}

impl Sim {
    fn cells_total(&self) -> u64 {
        u64::from(self.s.engine_facts().kv_cells_total)
    }

    /// The worker's refusal of `what`: the run fails here (the scheduler planned a command
    /// the engine cannot carry out).
    fn refused(&self, what: &str, full: strata_protocol::pool::PoolFull) -> ! {
        panic!(
            "the engine refuses {what} at {:?}: {full}; last actions {:#?}",
            self.now,
            &self.log[self.log.len().saturating_sub(10)..]
        )
    }

    /// Moves the engine's cells for one action, as the worker does, checking room first.
    pub(super) fn move_cells(&mut self, a: &Action) {
        let total = self.cells_total();
        match a {
            Action::Assign {
                seq, keep_tokens, ..
            } => {
                let held = self.pool.len(*seq);
                if *keep_tokens < held && self.last_loaded == Some((*seq, held)) {
                    self.room.longer_restores += 1;
                }
                self.pool.trim(*seq, *keep_tokens);
            }
            Action::CopyPrefix {
                from, to, tokens, ..
            } => self.pool.copy_prefix(*from, *to, *tokens),
            Action::RestoreConversation {
                conversation,
                into_seq,
                ..
            } => {
                let tokens = self.host.get(conversation).map_or(0, Vec::len) as u64;
                if let Err(full) = self.pool.room_replacing(*into_seq, tokens, total) {
                    self.refused("a conversation load", full);
                }
                self.pool.clear(*into_seq);
                self.pool.append(*into_seq, tokens as u32);
                self.last_loaded = Some((*into_seq, tokens as u32));
                return;
            }
            Action::EvictConversation { seq, .. } => self.pool.clear(*seq),
            Action::Park {
                from_seq,
                to: ParkPlace::HostRam,
                ..
            } => self.pool.clear(*from_seq),
            Action::Restore {
                request,
                from: ParkPlace::HostRam,
                into_seq,
            } => {
                let tokens = self.parked.get(request).map_or(0, |(_, c)| c.len()) as u64;
                if let Err(full) = self.pool.room_replacing(*into_seq, tokens, total) {
                    self.refused("a restore from host RAM", full);
                }
                self.pool.clear(*into_seq);
                self.pool.append(*into_seq, tokens as u32);
                self.room.host_restores += 1;
            }
            Action::Release {
                seq,
                keep_as_conversation: false,
                ..
            } => self.pool.clear(*seq),
            Action::Step(step) => {
                if let Err(full) = self.pool.room_for(step_cells(step), total) {
                    self.refused("a step", full);
                }
                if let Some(c) = &step.chunk {
                    self.pool.append(c.seq, c.tokens.end - c.tokens.start);
                }
                for (_, seq) in &step.decode {
                    self.pool.append(*seq, 1);
                }
                if total - self.pool.used() <= 3 {
                    self.room.full_pool_steps += 1;
                }
                // the host sends the next decode-only step ahead, to run right after this one
                let trims = self.s.engine_facts().trims_at_any_token;
                if step.chunk.is_none() && !step.decode.is_empty() && trims {
                    self.room.aheads += 1;
                    if self.pool.room_for(step.decode.len() as u64, total).is_err() {
                        self.room.aheads_not_run += 1;
                    }
                }
            }
            _ => {}
        }
        self.last_loaded = None;
    }

    /// The engine's pool and the scheduler's count the same cells (checked at idle points:
    /// no step outstanding).
    pub(super) fn check_pool(&self) {
        assert_eq!(
            self.pool.used(),
            self.s.pool.used(),
            "the engine holds {} cells, the scheduler counts {} at {:?}",
            self.pool.used(),
            self.s.pool.used(),
            self.now
        );
    }
}
