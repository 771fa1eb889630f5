//! The outlook's claims against what the scheduler then does (issue #62): the window's and
//! `/v1/scheduler`'s "why" for the one slot is the snapshot's `pause_outlook`, so every claim
//! it makes is checked at the next event.
//! - "paused at the next token": when the next step gives the holder a token, the holder no
//!   longer decodes in the slot (paused, parked, or ended by that token), unless aging has
//!   put another request first in line meanwhile (the claim named the first in line).
//! - "same class: waits for it to finish": the holder is never paused for that waiter (the
//!   rank cannot change but by a settings change or a re-prioritisation, not checked there).

use super::*;
use crate::lifecycle::{Phase, SlotState};
use crate::{PauseOutlookView, PauseVerdict};

/// The outlook after an event, and what it needs to be checked at the next.
#[derive(Debug, Clone)]
pub(crate) struct Claim {
    view: PauseOutlookView,
    holder_generated: u32,
    pauses: u64,
}

/// How often each claim was checked (so a generator that stops reaching one fails).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ClaimStats {
    pub paused_at_next_token: u64,
    pub same_class: u64,
}

impl Sim {
    /// The outlook now, as the snapshot shows it.
    pub(super) fn claim_now(&self) -> Option<Claim> {
        let view = self.s.outlook_view(self.now)?;
        Some(Claim {
            holder_generated: self.s.requests.get(&view.holder)?.generated(),
            pauses: self.s.counters.pauses,
            view,
        })
    }

    /// Checks the claim made after the last event against what the event led to (`step`: it
    /// was a step's end; `reranks`: a settings change or a re-prioritisation).
    pub(super) fn check_claim(&mut self, claim: Option<Claim>, step: bool, reranks: bool) {
        let Some(c) = claim else { return };
        let (holder, waiter) = (c.view.holder, c.view.waiter);
        let Some(h) = self.s.requests.get(&holder) else {
            return; // ended
        };
        let decoding_in_slot = matches!(self.s.slots[0].state, SlotState::Busy { request } if request == holder)
            && matches!(h.phase, Phase::Decoding { .. });
        match c.view.verdict {
            PauseVerdict::PausedAtNextToken if step => {
                // aging may have put another first in line since (one of the holder's class,
                // which does not pause it): the claim was about this waiter
                let same_waiter = self
                    .s
                    .outlook_view(self.now)
                    .is_none_or(|now| now.waiter == waiter);
                if h.generated() > c.holder_generated && same_waiter {
                    self.claims.paused_at_next_token += 1;
                    assert!(
                        !decoding_in_slot,
                        "at {:?}: {holder} was to be paused at the next token for {waiter}, \
                         and decodes on (claimed {:?}; now {:?})",
                        self.now,
                        c.view,
                        self.s.outlook_view(self.now),
                    );
                }
            }
            PauseVerdict::SameClass if !reranks => {
                self.claims.same_class += 1;
                let paused_for_it = self.s.counters.pauses > c.pauses
                    && h.paused_for == Some(waiter)
                    && !decoding_in_slot;
                assert!(
                    !paused_for_it,
                    "at {:?}: {waiter} was to wait for {holder} to finish (same class), and \
                     paused it",
                    self.now
                );
            }
            _ => {}
        }
    }
}
