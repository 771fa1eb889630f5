//! R7's outlook: what will happen to the request holding the one slot, by the rule that makes
//! it happen. [`Scheduler::pause_outlook`] is the one reading of R7: `maybe_pause` acts on it,
//! and the snapshot shows it (`pause_outlook`), so the window's and `/v1/scheduler`'s "why"
//! cannot claim a pause the scheduler will not make (issue #62: a waiter aged above a stream
//! of its own class was told the stream would be paused at the next token; R7 never pauses an
//! equal for aging alone).

use crate::Scheduler;
use crate::ids::RequestId;
use crate::lifecycle::SlotState;
use crate::types::Now;
use serde::Serialize;

/// What R7 will do about the slot's holder and the request first in line for the slot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Outlook {
    pub holder: RequestId,
    pub waiter: RequestId,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Verdict {
    /// Pauses it now; `in_pool`: parked keeping its cells (else host RAM).
    Now { in_pool: bool },
    /// Pauses it once it has decoded a token since it took the slot or resumed.
    AtNextToken,
    /// Ranks high enough, once the holder's `min_run_quantum_secs` ends at this time.
    Once(Now),
    /// The same class (priority + boost): aging alone never pauses an equal; it waits for
    /// the holder to finish.
    SameClass,
    /// Ranks lower (aging may lift it above later).
    RanksLower,
    /// Ranks higher, but the KV pool cannot give it the slot even with the holder parked.
    NoRoom,
}

/// The outlook as `/v1/scheduler` and the window see it (`pause_outlook`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PauseOutlookView {
    /// The request decoding in the one slot.
    pub holder: RequestId,
    /// The request first in line for the slot.
    pub waiter: RequestId,
    pub verdict: PauseVerdict,
    /// With `may_pause_later`: seconds until the holder's run quantum ends.
    pub in_secs: Option<f64>,
}

/// What R7 will do, in the snapshot's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseVerdict {
    /// Paused at the next token (now, or once it has decoded one since it resumed).
    PausedAtNextToken,
    /// Ranks high enough; the holder's run quantum is not over yet.
    MayPauseLater,
    /// Same priority (and boost): it waits for the holder to finish.
    SameClass,
    RanksLower,
    /// The KV pool cannot take it even with the holder parked.
    NoRoom,
}

/// R7's rank test: a waiter pauses the holder only if its effective priority is higher and
/// its class (priority + boost, aging left out) is not the holder's.
pub(crate) fn outranks(waiter: (i64, i64), holder: (i64, i64)) -> bool {
    let ((w_eff, w_class), (p_eff, p_class)) = (waiter, holder);
    w_eff > p_eff && w_class != p_class
}

impl Scheduler {
    /// R7's outlook at `now`: `None` where nothing can be paused (no `solo_priority`, more
    /// than one slot, the slot not decoding, nothing in line).
    pub(crate) fn pause_outlook(&mut self, now: Now) -> Option<Outlook> {
        if !self.settings.solo_priority || self.slots.len() != 1 {
            return None;
        }
        let SlotState::Busy { request: holder } = self.slots[0].state else {
            return None;
        };
        let pr = self.requests.get(&holder)?;
        let quantum_left = self.pause_quantum_left(pr, now)?;
        let tokens_since_resume = pr.tokens_since_resume;
        let p = (self.effective(pr, now), self.class(pr));
        let waiter = self.best_for_slot(now)?;
        let wr = self.requests.get(&waiter)?;
        let w = (self.effective(wr, now), self.class(wr));
        let verdict = if !outranks(w, p) {
            if w.1 == p.1 {
                Verdict::SameClass
            } else {
                Verdict::RanksLower
            }
        } else if quantum_left > Now::ZERO {
            Verdict::Once(now + quantum_left)
        } else {
            match self.park_plan(holder, waiter, now) {
                None => Verdict::NoRoom,
                Some(_) if tokens_since_resume == 0 => Verdict::AtNextToken,
                Some(in_pool) => Verdict::Now { in_pool },
            }
        };
        Some(Outlook {
            holder,
            waiter,
            verdict,
        })
    }

    /// The outlook as the snapshot shows it, at `now`.
    pub(crate) fn outlook_view(&self, now: Now) -> Option<PauseOutlookView> {
        let o = self.outlook?;
        let (verdict, in_secs) = match o.verdict {
            Verdict::Now { .. } | Verdict::AtNextToken => (PauseVerdict::PausedAtNextToken, None),
            Verdict::Once(at) if at > now => (
                PauseVerdict::MayPauseLater,
                Some(at.saturating_sub(now).as_secs_f64()),
            ),
            // its quantum ended since the last decision: the next one may pause it
            Verdict::Once(_) => (PauseVerdict::MayPauseLater, Some(0.0)),
            Verdict::SameClass => (PauseVerdict::SameClass, None),
            Verdict::RanksLower => (PauseVerdict::RanksLower, None),
            Verdict::NoRoom => (PauseVerdict::NoRoom, None),
        };
        Some(PauseOutlookView {
            holder: o.holder,
            waiter: o.waiter,
            verdict,
            in_secs,
        })
    }
}
