//! Pause, park to host RAM, restore, prefix reuse and the conversation cache on the real model
//! (`--threads 1`, so batch shape cannot change the last bits of the logits).

use crate::support::*;
use strata_desk::ids::{RequestId, SeqId, TokenId};
use strata_desk::protocol::{Command, Reply, Sampling};

const TOTAL: usize = 32;
const PAUSE_AFTER: usize = 10;
const CHUNK: usize = 256;

fn story_prompt() -> Vec<TokenId> {
    chat_prompt("Tell me a short story about a lighthouse keeper and a storm.")
}

fn side_prompt() -> Vec<TokenId> {
    chat_prompt("What is 2 + 2?")
}

/// An uninterrupted run on seq 0: the reference.
async fn uninterrupted(
    engine: &mut strata_desk::engine::EngineProcess,
    sampling: Sampling,
) -> Vec<TokenId> {
    run_alone(
        engine,
        RequestId(100),
        SeqId(0),
        &story_prompt(),
        CHUNK,
        TOTAL,
        sampling,
    )
    .await
}

#[tokio::test]
async fn a_paused_request_resumes_token_identical_greedy_and_seeded() {
    let _serial = real_model();
    let mut engine = start(2, 1).await;
    for (round, sampling) in [greedy(), seeded(11)].into_iter().enumerate() {
        let reference = uninterrupted(&mut engine, sampling.clone()).await;

        let a = RequestId(1 + 10 * round as u64);
        open(&mut engine, a, SeqId(0), sampling.clone()).await;
        let mut out = vec![read_aligned(&mut engine, a, &story_prompt(), 0, CHUNK).await];
        out.extend(decode_n(&mut engine, a, PAUSE_AFTER - 1).await);
        // a is paused (not scheduled) while b runs on the other sequence.
        run_alone(
            &mut engine,
            RequestId(2 + 10 * round as u64),
            SeqId(1),
            &side_prompt(),
            CHUNK,
            12,
            sampling.clone(),
        )
        .await;
        out.extend(decode_n(&mut engine, a, TOTAL - PAUSE_AFTER).await);
        call(&mut engine, Command::Close { request: a }).await;

        assert_eq!(out, reference, "round {round}: the paused request diverged");
    }
}

#[tokio::test]
async fn a_request_parked_to_ram_resumes_token_identical_in_another_sequence() {
    let _serial = real_model();
    let mut engine = start(2, 1).await;
    for (round, sampling) in [greedy(), seeded(23)].into_iter().enumerate() {
        let reference = uninterrupted(&mut engine, sampling.clone()).await;

        let a = RequestId(1 + 10 * round as u64);
        open(&mut engine, a, SeqId(0), sampling.clone()).await;
        let mut out = vec![read_aligned(&mut engine, a, &story_prompt(), 0, CHUNK).await];
        out.extend(decode_n(&mut engine, a, PAUSE_AFTER - 1).await);

        let Reply::Parked(parked) = call(&mut engine, Command::Park { request: a }).await else {
            panic!("not parked");
        };
        assert_eq!(
            parked.tokens as usize,
            story_prompt().len() + PAUSE_AFTER - 1
        );
        assert!(parked.bytes > 0);
        assert_eq!(
            stats(&mut engine).await.seq_tokens[0],
            0,
            "the park freed seq 0"
        );

        // Another request takes a's sequence.
        run_alone(
            &mut engine,
            RequestId(2 + 10 * round as u64),
            SeqId(0),
            &side_prompt(),
            CHUNK,
            12,
            sampling.clone(),
        )
        .await;

        let Reply::Restored(restored) = call(
            &mut engine,
            Command::Restore {
                request: a,
                seq: SeqId(1),
            },
        )
        .await
        else {
            panic!("not restored");
        };
        assert_eq!(restored.tokens, parked.tokens);
        out.extend(decode_n(&mut engine, a, TOTAL - PAUSE_AFTER).await);
        call(&mut engine, Command::Close { request: a }).await;

        assert_eq!(
            out, reference,
            "round {round}: the restored request diverged"
        );
    }
}

fn shared_prefix_prompts() -> (Vec<TokenId>, Vec<TokenId>) {
    let system = format!(
        "You answer questions about these records.\n{}",
        long_text(30)
    );
    let t = tokenizer();
    let template = strata_desk::chat::ChatTemplate::new(
        t.chat_template().as_deref(),
        &t.bos_text(),
        &t.eos_text(),
    )
    .unwrap();
    let render = |question: &str| {
        let messages = [
            strata_desk::chat::ChatMessage::new("system", &system),
            strata_desk::chat::ChatMessage::new("user", question),
        ];
        t.tokenize_segments(&template.render(&messages).unwrap())
    };
    (
        render("Which town traded salt?"),
        render("Which year had the most glass?"),
    )
}

fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// What "the same continuation" can promise on a unified KV pool: llama.cpp's attention sums
/// over the pool's cells in cell order, so a sequence whose cells sit elsewhere in the pool (other
/// sequences' cells in between) may differ in the last bits, which can flip a near-tie (measured
/// here: token 6 of 16). Each case below therefore starts from the same cell layout as the fresh
/// read: the pool is emptied first, and trimming frees the cells right after the kept prefix,
/// where llama.cpp places the suffix. And the prefix kept ends on a chunk boundary: then the
/// suffix is read in the same batches as in the fresh read. A prefix that ends mid-chunk is
/// read further in a shorter first batch, and ggml's AVX-512 CPU code (the variant the engine
/// picks on such a CPU) rounds a row differently by the batch it is in: measured on the test
/// model, token 7 of 16 flipped with the `skylakex` and `zen4` variants, not with `haswell`.
/// (The tests of what R8 promises, a pause or a park continuing token-identical, hold on every
/// variant: `engine_exact.rs` and the others here.)
#[tokio::test]
async fn trimming_to_a_shared_prefix_or_copying_it_reads_only_the_suffix_and_continues_as_a_fresh_read()
 {
    let _serial = real_model();
    let (first, second) = shared_prefix_prompts();
    let shared = common_prefix(&first, &second);
    assert!(
        shared > 300 && shared < second.len(),
        "shared prefix of {shared} tokens"
    );
    // the shared prefix, to the chunk boundary within it
    let shared = shared / CHUNK * CHUNK;
    let mut engine = start(2, 1).await;

    // The reference: `second` read fresh on seq 0 of an empty pool.
    let fresh = run_alone(
        &mut engine,
        RequestId(1),
        SeqId(0),
        &second,
        CHUNK,
        16,
        greedy(),
    )
    .await;
    call(
        &mut engine,
        Command::Trim {
            seq: SeqId(0),
            keep_tokens: 0,
        },
    )
    .await;

    // seq 0 reads `first`; then `second` keeps the shared prefix and reads only the rest.
    run_alone(
        &mut engine,
        RequestId(2),
        SeqId(0),
        &first,
        CHUNK,
        4,
        greedy(),
    )
    .await;
    let before = stats(&mut engine).await.prompt_tokens_read;
    let trimmed = RequestId(3);
    let reply = call(
        &mut engine,
        Command::Open {
            request: trimmed,
            seq: SeqId(0),
            keep_tokens: shared as u32,
            sampling: greedy(),
        },
    )
    .await;
    assert!(
        matches!(reply, Reply::Opened { kept_tokens, .. } if kept_tokens as usize == shared),
        "{reply:?}"
    );
    let mut out = vec![read_aligned(&mut engine, trimmed, &second, shared, CHUNK).await];
    out.extend(decode_n(&mut engine, trimmed, 15).await);
    call(&mut engine, Command::Close { request: trimmed }).await;
    let read = stats(&mut engine).await.prompt_tokens_read - before;
    assert_eq!(
        read as usize,
        second.len() - shared,
        "only the suffix is read"
    );
    assert_eq!(
        out, fresh,
        "trimmed continuation diverged from a fresh read"
    );

    // seq 0 keeps only the shared prefix; seq 1 gets a copy of it and reads the suffix.
    call(
        &mut engine,
        Command::Trim {
            seq: SeqId(0),
            keep_tokens: shared as u32,
        },
    )
    .await;
    let reply = call(
        &mut engine,
        Command::CopyPrefix {
            from: SeqId(0),
            to: SeqId(1),
            tokens: shared as u32,
        },
    )
    .await;
    assert!(
        matches!(reply, Reply::Copied { held_tokens, .. } if held_tokens as usize == shared),
        "{reply:?}"
    );
    let before = stats(&mut engine).await.prompt_tokens_read;
    let copied = RequestId(4);
    let reply = call(
        &mut engine,
        Command::Open {
            request: copied,
            seq: SeqId(1),
            keep_tokens: shared as u32,
            sampling: greedy(),
        },
    )
    .await;
    assert!(
        matches!(reply, Reply::Opened { kept_tokens, .. } if kept_tokens as usize == shared),
        "{reply:?}"
    );
    let mut out = vec![read_aligned(&mut engine, copied, &second, shared, CHUNK).await];
    out.extend(decode_n(&mut engine, copied, 15).await);
    let read = stats(&mut engine).await.prompt_tokens_read - before;
    assert_eq!(
        read as usize,
        second.len() - shared,
        "only the suffix is read after a copy"
    );
    assert_eq!(
        out, fresh,
        "continuation from a copied prefix diverged from a fresh read"
    );
}

#[tokio::test]
async fn a_conversation_parked_in_the_ram_cache_comes_back_for_its_next_turn_and_only_new_tokens_are_read()
 {
    let _serial = real_model();
    let mut engine = start(1, 1).await;
    let turn1 = chat_prompt(&format!(
        "{}\nSummarise the first three facts.",
        long_text(12)
    ));
    let answer = run_alone(
        &mut engine,
        RequestId(1),
        SeqId(0),
        &turn1,
        CHUNK,
        16,
        greedy(),
    )
    .await;
    let held = stats(&mut engine).await.seq_tokens[0] as usize;
    assert_eq!(
        held,
        turn1.len() + answer.len() - 1,
        "the last sampled token is not in the cache yet"
    );

    // A side request needs the only slot: the conversation moves to the RAM cache.
    let Reply::ConversationSaved { moved, evicted, .. } = call(
        &mut engine,
        Command::SaveConversation {
            seq: SeqId(0),
            key: 7,
            keep: Vec::new(),
        },
    )
    .await
    else {
        panic!("not saved");
    };
    assert_eq!(moved.tokens as usize, held);
    assert!(evicted.is_empty());
    run_alone(
        &mut engine,
        RequestId(2),
        SeqId(0),
        &side_prompt(),
        CHUNK,
        8,
        greedy(),
    )
    .await;

    // The next turn extends the conversation token for token.
    let mut turn2 = turn1.clone();
    turn2.extend(&answer);
    turn2.extend(tokenizer().tokenize_markup(
        "<|im_end|>\n<|im_start|>user\nAnd the next one?<|im_end|>\n<|im_start|>assistant\n",
    ));
    let Reply::ConversationLoaded { moved, .. } = call(
        &mut engine,
        Command::LoadConversation {
            key: 7,
            seq: SeqId(0),
            take: true,
        },
    )
    .await
    else {
        panic!("not loaded");
    };
    assert_eq!(moved.tokens as usize, held);
    let after_load = stats(&mut engine).await;
    assert_eq!(
        after_load.conversation_cache_entries, 0,
        "a take moves it out"
    );
    let before = after_load.prompt_tokens_read;
    let next = RequestId(3);
    let reply = call(
        &mut engine,
        Command::Open {
            request: next,
            seq: SeqId(0),
            keep_tokens: held as u32,
            sampling: greedy(),
        },
    )
    .await;
    assert!(
        matches!(reply, Reply::Opened { kept_tokens, .. } if kept_tokens as usize == held),
        "{reply:?}"
    );
    let mut out = vec![read_aligned(&mut engine, next, &turn2, held, CHUNK).await];
    out.extend(decode_n(&mut engine, next, 11).await);
    call(&mut engine, Command::Close { request: next }).await;
    let read = (stats(&mut engine).await.prompt_tokens_read - before) as usize;
    assert_eq!(read, turn2.len() - held, "only the new tokens are read");
    assert!(read < 40, "{read} tokens read for a short follow-up");

    // The same turn read from scratch continues the same way.
    let fresh = run_alone(
        &mut engine,
        RequestId(4),
        SeqId(0),
        &turn2,
        CHUNK,
        12,
        greedy(),
    )
    .await;
    assert_eq!(
        out, fresh,
        "the restored conversation diverged from a fresh read"
    );
}
