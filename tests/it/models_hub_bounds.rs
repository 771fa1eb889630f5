//! The hub client's bounds against a hostile hub (issue #61 items 2 and 6): an endless
//! listing, a header that never ends, a listing and a header that trickle in, pages without
//! end and pages in a loop each stop at their bound, and the error names it with its value.

use crate::hostile_hub::{RESOLVE, TREE, serve, trickle, within};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::get;
use futures_util::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use strata_desk::models::hub::{HubBounds, HubClient};

/// Issue #61 item 2: an endless listing was read into memory without a bound (`pull` aborted
/// after 11.5 s under a 3 GiB limit). Here a listing of 64 MiB (valid JSON: a client without
/// a bound reads all of it) is stopped at 16 MiB, and the error names the bound.
#[tokio::test]
async fn a_listing_past_16_mib_is_stopped_there_and_the_error_names_the_bound() {
    const SERVED_BYTES: usize = 64 << 20;
    let streamed = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&streamed);
    let app = Router::new().route(
        TREE,
        get(move || {
            let counter = Arc::clone(&counter);
            async move {
                let entry = br#"{"type":"file","oid":"0","size":1,"path":"model-Q4_K_M.gguf"},"#;
                let chunk = Bytes::from(entry.repeat((64 << 10) / entry.len()));
                // `[`, then 64 KiB chunks of entries to SERVED_BYTES, then the last entry and `]`
                let chunks = futures_util::stream::unfold(Some(0usize), move |state| {
                    let (chunk, counter) = (chunk.clone(), Arc::clone(&counter));
                    async move {
                        let sent = state?;
                        let (next, state) = if sent == 0 {
                            (Bytes::from_static(b"["), Some(1))
                        } else if sent < SERVED_BYTES {
                            (chunk.clone(), Some(sent + chunk.len()))
                        } else {
                            let last = br#"{"type":"file","oid":"0","size":1,"path":"end"}]"#;
                            (Bytes::from_static(last), None)
                        };
                        counter.fetch_add(next.len(), Ordering::Relaxed);
                        Some((Ok::<_, std::io::Error>(next), state))
                    }
                });
                Body::from_stream(chunks)
            }
        }),
    );
    let base = serve(app).await;
    let client = HubClient::new(&base, None);
    let err = within(
        60,
        "the listing",
        client.list_files("someone/endless", "main"),
    )
    .await
    .map(|files| format!("{} files read", files.len()))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the hub's listing of someone/endless passed 16 MiB (LISTING_BYTES_MAX): stopped reading"
    );
    // stopped there: what the server wrote before the connection closed is the bound and
    // the sockets' buffers, not the 64 MiB
    let streamed = streamed.load(Ordering::Relaxed);
    assert!(streamed < 32 << 20, "{streamed} bytes streamed");
}

/// A GGUF header that never ends: its one key an array of 2^40 bytes, zeros from there on.
fn endless_header_byte(at: u64) -> u8 {
    static PREFIX: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        let mut p = b"GGUF".to_vec();
        p.extend(3u32.to_le_bytes());
        p.extend(0u64.to_le_bytes());
        p.extend(1u64.to_le_bytes());
        p.extend(4u64.to_le_bytes());
        p.extend(b"junk");
        p.extend(9u32.to_le_bytes());
        p.extend(0u32.to_le_bytes());
        p.extend((1u64 << 40).to_le_bytes());
        p
    });
    usize::try_from(at)
        .ok()
        .and_then(|i| prefix.get(i))
        .copied()
        .unwrap_or(0)
}

/// `bytes=A-B` of a Range header.
fn range(headers: &HeaderMap) -> Option<(u64, u64)> {
    let spec = headers.get(header::RANGE)?.to_str().ok()?;
    let (a, b) = spec.strip_prefix("bytes=")?.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Issue #61 item 2, the header: a remote GGUF whose header never ends is read up to the
/// header bound (here 4 MiB), and the error names it rather than "continues past".
#[tokio::test]
async fn a_remote_header_past_its_bound_is_stopped_there_and_the_error_names_the_bound() {
    let served = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&served);
    let app = Router::new().route(
        RESOLVE,
        get(move |headers: HeaderMap| {
            let counter = Arc::clone(&counter);
            async move {
                let (start, end) = range(&headers).unwrap_or((0, (1 << 30) - 1));
                let chunks =
                    futures_util::stream::iter((start..=end).step_by(1 << 20)).map(move |from| {
                        let to = (from + (1 << 20)).min(end + 1);
                        counter.fetch_add((to - from) as usize, Ordering::Relaxed);
                        Ok::<_, std::io::Error>(Bytes::from(
                            (from..to).map(endless_header_byte).collect::<Vec<u8>>(),
                        ))
                    });
                (StatusCode::PARTIAL_CONTENT, Body::from_stream(chunks))
            }
        }),
    );
    let base = serve(app).await;
    let client = HubClient::new(&base, None).with_bounds(HubBounds {
        header_bytes_max: 4 << 20,
        ..HubBounds::default()
    });
    let err = within(
        120,
        "the header's reading",
        client.remote_facts("someone/endless", "main", "junk.gguf"),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the GGUF header of junk.gguf in someone/endless passed 4 MiB (HEADER_BYTES_MAX): stopped reading"
    );
    let served = served.load(Ordering::Relaxed);
    assert!(served <= 8 << 20, "{served} bytes served");
}

/// A header that trickles in (a byte every 300 ms) ends at its deadline.
#[tokio::test]
async fn a_remote_header_that_trickles_in_ends_at_its_deadline() {
    let app = Router::new().route(
        RESOLVE,
        get(|| async {
            (
                StatusCode::PARTIAL_CONTENT,
                trickle(b"GGUF", Duration::from_millis(300)),
            )
        }),
    );
    let base = serve(app).await;
    let client = HubClient::new(&base, None).with_bounds(HubBounds {
        header_deadline: Duration::from_secs(1),
        ..HubBounds::default()
    });
    let started = Instant::now();
    let err = within(
        20,
        "the header's reading",
        client.remote_facts("someone/slow", "main", "slow.gguf"),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the GGUF header of slow.gguf in someone/slow took longer than 1 s (HEADER_DEADLINE_SECS): stopped reading"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Issue #61 item 6: a listing that trickles (a byte every 500 ms; the hub's was one every
/// 5 s) hung `pull`. A listing has a deadline, all pages together.
#[tokio::test]
async fn a_listing_that_trickles_in_ends_at_its_deadline() {
    let app = Router::new().route(
        TREE,
        get(|| async { trickle(b"[", Duration::from_millis(500)) }),
    );
    let base = serve(app).await;
    let client = HubClient::new(&base, None).with_bounds(HubBounds {
        listing_deadline: Duration::from_millis(1500),
        ..HubBounds::default()
    });
    let started = Instant::now();
    let err = within(20, "the listing", client.list_files("someone/slow", "main"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the hub's listing of someone/slow took longer than 1.5 s (LISTING_DEADLINE_SECS): stopped reading"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A hub whose listing pages each name a next page (`next(cursor)`), empty; how many pages
/// it served.
async fn paging_hub(next: fn(&str, u64) -> String) -> (String, Arc<AtomicUsize>) {
    let pages = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&pages);
    let app = Router::new().route(
        TREE,
        get(
            move |headers: HeaderMap,
                  axum::extract::Query(q): axum::extract::Query<
                std::collections::HashMap<String, String>,
            >| {
                let counter = Arc::clone(&counter);
                async move {
                    counter.fetch_add(1, Ordering::Relaxed);
                    let host = headers.get(header::HOST).unwrap().to_str().unwrap();
                    let cursor = q.get("cursor").and_then(|c| c.parse().ok()).unwrap_or(0);
                    let link = format!("<{}>; rel=\"next\"", next(host, cursor));
                    ([(header::LINK, link)], axum::Json(Vec::<u8>::new()))
                }
            },
        ),
    );
    (serve(app).await, pages)
}

/// Pages without end stop at the page bound (100), named.
#[tokio::test]
async fn a_listing_of_pages_without_end_stops_at_the_page_bound() {
    let (base, pages) = paging_hub(|host, cursor| {
        format!(
            "http://{host}/api/models/someone/pages/tree/main?recursive=true&cursor={}",
            cursor + 1
        )
    })
    .await;
    let client = HubClient::new(&base, None);
    let err = within(
        60,
        "the listing",
        client.list_files("someone/pages", "main"),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the hub's listing of someone/pages passed 100 pages (LISTING_PAGES_MAX): stopped reading"
    );
    assert_eq!(pages.load(Ordering::Relaxed), 100);
}

/// A page that names itself (or one read before) as the next is a loop, stopped at once.
#[tokio::test]
async fn a_listing_whose_next_page_was_read_before_is_a_loop_and_stops() {
    let (base, pages) = paging_hub(|host, cursor| {
        // page 0 names page 1, which names itself
        format!(
            "http://{host}/api/models/someone/loop/tree/main?recursive=true&cursor={}",
            cursor.max(1)
        )
    })
    .await;
    let client = HubClient::new(&base, None);
    let err = within(20, "the listing", client.list_files("someone/loop", "main"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the hub's listing of someone/loop names {base}/api/models/someone/loop/tree/main?recursive=true&cursor=1 as its next page a second time (a loop): stopped reading"
        )
    );
    assert_eq!(pages.load(Ordering::Relaxed), 2);
}
