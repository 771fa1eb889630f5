//! What a test reads back from a run: records, times, and the actions in order.

use super::*;

impl Sim {
    pub(crate) fn rec(&self, id: u64) -> &Record {
        &self.records[&RequestId(id)]
    }

    pub(crate) fn ttft(&self, id: u64) -> f64 {
        let r = self.rec(id);
        r.first_token.expect("no token").as_secs_f64() - self.arrival(id)
    }

    pub(crate) fn arrival(&self, id: u64) -> f64 {
        self.rec(id).arrived.as_secs_f64()
    }

    /// Index of the first action matching `f`.
    pub(crate) fn pos(&self, f: impl Fn(&Action) -> bool) -> Option<usize> {
        self.log.iter().position(|(_, a)| f(a))
    }

    pub(crate) fn count(&self, f: impl Fn(&Action) -> bool) -> usize {
        self.log.iter().filter(|(_, a)| f(a)).count()
    }

    pub(crate) fn failed_with(&self, id: u64) -> Option<FailKind> {
        self.rec(id).ends.iter().find_map(|(_, a)| match a {
            Action::Fail { error, .. } => Some(error.clone()),
            _ => None,
        })
    }

    pub(crate) fn refused_with(&self, id: u64) -> Option<Refusal> {
        self.rec(id).refused.as_ref().map(|(_, r)| r.clone())
    }

    /// Every chunk, in step order.
    pub(crate) fn chunks(&self) -> Vec<(u64, Range<u32>)> {
        self.log
            .iter()
            .filter_map(|(_, a)| match a {
                Action::Step(Step { chunk: Some(c), .. }) => Some((c.request.0, c.tokens.clone())),
                _ => None,
            })
            .collect()
    }

    /// Index (in `chunks()`) of the first chunk of `id`.
    pub(crate) fn first_chunk(&self, id: u64) -> usize {
        self.chunks()
            .iter()
            .position(|(r, _)| *r == id)
            .expect("never read")
    }

    /// Index (in `chunks()`) of the last chunk of `id`.
    pub(crate) fn last_chunk(&self, id: u64) -> usize {
        self.chunks()
            .iter()
            .rposition(|(r, _)| *r == id)
            .expect("never read")
    }

    /// Time of the first action matching `f`.
    pub(crate) fn time_of(&self, f: impl Fn(&Action) -> bool) -> Option<f64> {
        self.log
            .iter()
            .find(|(_, a)| f(a))
            .map(|(t, _)| t.as_secs_f64())
    }
}

pub(crate) fn is_park(id: u64) -> impl Fn(&Action) -> bool {
    move |a| matches!(a, Action::Park { request, .. } if request.0 == id)
}

pub(crate) fn is_restore(id: u64) -> impl Fn(&Action) -> bool {
    move |a| matches!(a, Action::Restore { request, .. } if request.0 == id)
}

pub(crate) fn is_assign(id: u64) -> impl Fn(&Action) -> bool {
    move |a| matches!(a, Action::Assign { request, .. } if request.0 == id)
}

pub(crate) fn is_release(id: u64) -> impl Fn(&Action) -> bool {
    move |a| matches!(a, Action::Release { request, .. } if request.0 == id)
}

pub(crate) fn is_deliver(id: u64) -> impl Fn(&Action) -> bool {
    move |a| matches!(a, Action::Deliver { request, .. } if request.0 == id)
}
