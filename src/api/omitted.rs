//! What a request's preparation left out (an image block, a server tool, an input item of a
//! kind this engine does not read), counted per request and said in one warning line when
//! the preparation ends: a request with 100,000 images once wrote 100,000 lines. Each item is
//! also logged at debug level with where it was.

use std::cell::RefCell;
use std::collections::BTreeMap;

thread_local! {
    /// Counts by kind for the request prepared on this thread ([`super::Limits::prepare`]).
    static COUNTS: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// One item of `kind` left out; `detail` says which (logged at debug level).
pub fn note(kind: &'static str, detail: std::fmt::Arguments<'_>) {
    tracing::debug!("left out {kind}: {detail}");
    COUNTS.with(|counts| *counts.borrow_mut().entry(kind).or_default() += 1);
}

/// Forgets what an earlier preparation on this thread counted.
pub fn clear() {
    COUNTS.with(|counts| counts.borrow_mut().clear());
}

/// Says, in one warning line, what the request prepared on this thread left out (nothing if
/// nothing), and forgets it.
pub fn report() {
    let counts = COUNTS.with(|counts| std::mem::take(&mut *counts.borrow_mut()));
    if let Some(line) = summary(&counts) {
        tracing::warn!("{line}");
    }
}

fn summary(counts: &BTreeMap<&'static str, u64>) -> Option<String> {
    if counts.is_empty() {
        return None;
    }
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{n} × {k}")).collect();
    Some(format!(
        "a request's {} left out (this engine reads text and function tools only; \
         each at debug level)",
        parts.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_items_left_out_make_one_line_with_their_counts() {
        clear();
        for i in 0..1000 {
            note("image block", format_args!("messages[{i}]"));
        }
        note("tool of another type", format_args!("tools[0]"));
        let counts = COUNTS.with(|c| c.borrow().clone());
        assert_eq!(
            summary(&counts).unwrap(),
            "a request's 1000 × image block, 1 × tool of another type left out (this engine \
             reads text and function tools only; each at debug level)"
        );
        report();
        assert!(COUNTS.with(|c| c.borrow().is_empty()));
        assert_eq!(summary(&BTreeMap::new()), None);
    }
}
