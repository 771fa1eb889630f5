//! A sliding-window model on the real engine: Gemma 3 270M (a 512-token window in five layers
//! of six) with its window layers keeping only their window (`swa_full` off, the default, as
//! llama.cpp's servers run it). Its cache lets go of the cells a sequence's newest token no
//! longer reaches, so a conversation continues only whole, while a step ahead's one-token
//! rewind stays exact.

use crate::models_hub::gemma_path;
use crate::support::*;
use strata_desk::engine::{EngineError, EngineProcess, WorkerLaunch};
use strata_desk::ids::{RequestId, SeqId, TokenId};
use strata_desk::protocol::{Command, ErrorKind, Reply, WorkerOptions};
use strata_desk::tokenizer::Tokenizer;

const CONTINUATION_TOKENS: usize = 16;

async fn gemma(swa_full: bool) -> EngineProcess {
    let launch = WorkerLaunch::new(
        worker_exe(),
        WorkerOptions::of(strata_desk::protocol::EngineSettings {
            ctx_tokens: 4096,
            // the window layers' cache: 512 x 2 sequences + 512 cells, which a 2,000-token
            // read wraps around (with 16 sequences it would not before 8,704)
            kv_sequences: 2,
            threads: 2,
            swa_full,
            ..strata_desk::protocol::EngineSettings::for_model(gemma_path())
        }),
    );
    EngineProcess::start(&launch, 1)
        .await
        .expect("the worker starts with Gemma 3")
}

/// About 2,000 tokens of Gemma's vocabulary, its BOS first.
fn long_prompt() -> Vec<TokenId> {
    let t = Tokenizer::load(&gemma_path()).expect("Gemma's vocabulary loads");
    let mut prompt: Vec<TokenId> = t.bos_to_add().into_iter().collect();
    prompt.extend(t.tokenize_text(&format!("{}\nWhich town traded salt?", long_text(75))));
    assert!(
        (1700..2300).contains(&prompt.len()),
        "the prompt has {} tokens",
        prompt.len()
    );
    prompt
}

#[tokio::test]
async fn a_sliding_window_model_continues_only_whole_conversations_unless_swa_full_and_still_steps_ahead()
 {
    let _serial = real_model();
    let windowed = gemma(false).await;
    let model = &windowed.handshake().model;
    assert!(!model.trims_at_any_token, "the window layers keep no cut");
    assert!(model.rewinds_last_token, "a step ahead can be undone");
    windowed.shutdown().await;

    let full = gemma(true).await;
    let model = &full.handshake().model;
    assert!(model.trims_at_any_token && model.rewinds_last_token);
    full.shutdown().await;
}

#[tokio::test]
async fn steps_ahead_rewound_on_a_wrapped_window_cache_continue_token_identical_and_a_cut_before_the_window_is_refused()
 {
    let _serial = real_model();
    let mut engine = gemma(false).await;
    let prompt = long_prompt();

    open(&mut engine, RequestId(1), SeqId(0), greedy()).await;
    let mut straight = vec![read_aligned(&mut engine, RequestId(1), &prompt, 0, 512).await];
    straight.extend(decode_n(&mut engine, RequestId(1), CONTINUATION_TOKENS).await);
    call(
        &mut engine,
        Command::Close {
            request: RequestId(1),
        },
    )
    .await;

    // sequence 0 now holds the prompt and the continuation, its window layers only their
    // last cells (the wrap let the first ~470 positions go): a cut whose next token's window
    // reaches back past them is refused, not read on with part of its window missing
    let cut = engine
        .call(
            Command::Open {
                request: RequestId(2),
                seq: SeqId(0),
                keep_tokens: 600,
                sampling: greedy(),
            },
            engine.step_deadline(0, 1),
        )
        .await;
    match cut {
        Err(EngineError::Refused { kind, message }) => {
            assert_eq!(kind, ErrorKind::Engine);
            assert!(message.contains("sliding-window cache"), "{message}");
        }
        other => panic!("a cut before the window was not refused: {other:?}"),
    }

    open(&mut engine, RequestId(3), SeqId(0), greedy()).await;
    let mut rewound = vec![read_aligned(&mut engine, RequestId(3), &prompt, 0, 512).await];
    for _ in 0..CONTINUATION_TOKENS {
        let ahead = call(
            &mut engine,
            Command::StepAhead {
                decode: vec![RequestId(3)],
            },
        )
        .await;
        assert!(matches!(ahead, Reply::StepDone(_)), "{ahead:?}");
        assert_eq!(
            call(&mut engine, Command::Rewind).await,
            Reply::Rewound { cells: 1 }
        );
        rewound.extend(decode_n(&mut engine, RequestId(3), 1).await);
    }
    assert_eq!(
        rewound, straight,
        "a rewound step ahead changed what followed"
    );
}
