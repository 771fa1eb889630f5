//! The pool's room as the scheduler counts it: cells held (each shared cell once) plus what
//! running requests pledged, what the engine holds after a step (the service's pool-wide
//! check), and the transient room a command needs beyond what it leaves held (SCHEDULING.md,
//! "Transient room").

use super::Scheduler;
use super::types::ConversationId;

impl Scheduler {
    /// Cells held now, each shared cell once, plus what running requests have pledged.
    pub(crate) fn cells_used(&self) -> u64 {
        self.pool.used() + self.pledged()
    }

    /// Cells running requests may still take without asking (their reservation past what
    /// their sequence holds).
    pub(crate) fn pledged(&self) -> u64 {
        self.requests
            .values()
            .filter_map(|r| {
                let seq = r.phase.seq()?;
                Some(u64::from(
                    r.reserved_cells.saturating_sub(self.pool.len(seq)),
                ))
            })
            .sum()
    }

    /// The cells the engine holds once the outstanding step is done (each shared cell once):
    /// the pool now, plus the chunk's tokens and one fed token per decode. `None` with no step
    /// outstanding. The service compares it with what the engine reports after a step in
    /// which nothing failed.
    pub fn cells_after_step(&self) -> Option<u64> {
        let step = self.outstanding.as_ref()?;
        let chunk = step
            .chunk
            .as_ref()
            .map_or(0, |c| u64::from(c.tokens.end - c.tokens.start));
        Some(self.pool.used() + chunk + step.decode.len() as u64)
    }

    /// The cells restoring host-RAM conversation `cid` for a request reserving `reserve`
    /// needs free: the engine loads it whole before the request's `open` cuts it to the
    /// shared prefix (transient room), so the larger of the two.
    pub(crate) fn restore_need(&self, cid: ConversationId, reserve: u32) -> u32 {
        let whole = self
            .host_cache
            .iter()
            .find(|(c, _)| *c == cid)
            .map_or(0, |(_, conv)| conv.tokens.len());
        reserve.max(whole)
    }

    pub(crate) fn cells_free(&self) -> u64 {
        u64::from(self.facts.kv_cells_total).saturating_sub(self.cells_used())
    }
}
