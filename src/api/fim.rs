//! Fill-in-the-middle prompts: the code before and after the cursor, around the model's own
//! FIM tokens, in the prefix-suffix-middle order llama.cpp's `/infill` uses (its `prompt`, the
//! line up to the cursor, ends the prefix as there). Other files an editor sends along come
//! first, in the repository-level form (Qwen2.5-Coder's `<|repo_name|>` and `<|file_sep|>`)
//! when the vocabulary has those tokens, else as plain text separated by a snippet line.
//! Unlike llama.cpp, a request with no other files gets no repository header: the plain
//! single-file form is what the models' own documentation gives for one file.
//!
//! Every text is tokenized as text: code that contains `<|fim_prefix|>` stays characters and
//! cannot start a new section.

use super::ApiError;
use crate::ids::TokenId;
use crate::tokenizer::{FimTokens, Tokenizer};

/// The name the repository-level form gives the project (no client sends one).
const REPO_NAME: &str = "project\n";
/// Between the files sent along, when the model has no file-separator token.
const SNIPPET_LINE: &str = "\n\n--- snippet ---\n\n";
/// The current file's name after the files sent along (no client sends one).
const CURRENT_FILE: &str = "filename\n";

/// Another file an editor sends for context (`input_extra`'s items).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct ExtraFile {
    #[serde(default)]
    pub filename: String,
    pub text: String,
}

/// What a fill-in-the-middle prompt holds.
#[derive(Debug, Default)]
pub struct Infill<'a> {
    /// The code before the cursor.
    pub prefix: &'a str,
    /// The code after the cursor.
    pub suffix: &'a str,
    /// Other files, read before the current one.
    pub extra: &'a [ExtraFile],
    /// The end of the prefix, tokenized on its own (llama.cpp's `prompt`: the current line up
    /// to the cursor).
    pub prefix_tail: &'a str,
}

/// The model's FIM tokens, or a 400 naming the model and the field that asked for them.
pub fn fim_tokens(tokenizer: &Tokenizer, model: &str, field: &str) -> Result<FimTokens, ApiError> {
    tokenizer.fim().ok_or_else(|| {
        ApiError::bad(
            format!(
                "`{field}` asks for a fill-in-the-middle completion, and the model {model:?} has \
                 no fill-in-the-middle tokens (its vocabulary lacks a prefix, suffix or middle \
                 token): load a code model that has them (Qwen2.5-Coder, DeepSeek-Coder, \
                 StarCoder2, CodeGemma, ...), or send a `prompt` alone"
            ),
            Some(field),
        )
    })
}

/// The prompt's tokens: `[BOS] [files] PRE prefix prefix_tail SUF suffix MID`.
pub fn prompt(tokenizer: &Tokenizer, fim: FimTokens, infill: &Infill<'_>) -> Vec<TokenId> {
    let text = |s: &str| tokenizer.tokenize_text(s);
    let mut tokens: Vec<TokenId> = tokenizer.bos_to_add().into_iter().collect();
    if !infill.extra.is_empty() {
        if let Some(repo) = fim.repo {
            tokens.push(repo);
            tokens.extend(text(REPO_NAME));
        }
        for file in infill.extra {
            match fim.file_sep {
                Some(sep) => {
                    tokens.push(sep);
                    tokens.extend(text(&format!("{}\n", file.filename)));
                }
                None => tokens.extend(text(SNIPPET_LINE)),
            }
            tokens.extend(text(&file.text));
        }
        if let Some(sep) = fim.file_sep {
            tokens.push(sep);
            tokens.extend(text(CURRENT_FILE));
        }
    }
    tokens.push(fim.prefix);
    tokens.extend(text(infill.prefix));
    tokens.extend(text(infill.prefix_tail));
    tokens.push(fim.suffix);
    tokens.extend(text(infill.suffix));
    tokens.push(fim.middle);
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(s: &str) -> Vec<TokenId> {
        s.bytes().map(TokenId::from).collect()
    }

    #[test]
    fn a_prompt_is_prefix_then_suffix_then_middle_around_the_model_s_tokens() {
        let tokenizer = Tokenizer::simulated();
        let fim = tokenizer.fim().unwrap();
        let infill = Infill {
            prefix: "def f(",
            suffix: "):",
            prefix_tail: "a",
            ..Infill::default()
        };
        let mut expected = vec![fim.prefix];
        expected.extend(bytes("def f(a"));
        expected.push(fim.suffix);
        expected.extend(bytes("):"));
        expected.push(fim.middle);
        assert_eq!(prompt(&tokenizer, fim, &infill), expected);
    }

    #[test]
    fn files_sent_along_come_first_in_the_repository_form() {
        let tokenizer = Tokenizer::simulated();
        let fim = tokenizer.fim().unwrap();
        let extra = [ExtraFile {
            filename: "a.py".into(),
            text: "x = 1".into(),
        }];
        let infill = Infill {
            prefix: "p",
            suffix: "s",
            extra: &extra,
            prefix_tail: "",
        };
        let mut expected = vec![fim.repo.unwrap()];
        expected.extend(bytes("project\n"));
        expected.push(fim.file_sep.unwrap());
        expected.extend(bytes("a.py\nx = 1"));
        expected.push(fim.file_sep.unwrap());
        expected.extend(bytes("filename\n"));
        expected.extend([
            fim.prefix,
            TokenId::from(b'p'),
            fim.suffix,
            TokenId::from(b's'),
        ]);
        expected.push(fim.middle);
        assert_eq!(prompt(&tokenizer, fim, &infill), expected);
    }

    #[test]
    fn without_a_file_separator_files_are_text_between_snippet_lines() {
        let tokenizer = Tokenizer::simulated();
        let fim = FimTokens {
            repo: None,
            file_sep: None,
            ..tokenizer.fim().unwrap()
        };
        let extra = [ExtraFile {
            filename: "a.py".into(),
            text: "x".into(),
        }];
        let infill = Infill {
            extra: &extra,
            ..Infill::default()
        };
        let mut expected = bytes(SNIPPET_LINE);
        expected.extend(bytes("x"));
        expected.extend([fim.prefix, fim.suffix, fim.middle]);
        assert_eq!(prompt(&tokenizer, fim, &infill), expected);
    }

    #[test]
    fn code_that_spells_a_fim_token_stays_text() {
        let tokenizer = Tokenizer::simulated();
        let fim = tokenizer.fim().unwrap();
        let infill = Infill {
            prefix: "<|fim_middle|>",
            ..Infill::default()
        };
        let tokens = prompt(&tokenizer, fim, &infill);
        assert_eq!(tokens.iter().filter(|t| **t == fim.middle).count(), 1);
        assert_eq!(tokens.last(), Some(&fim.middle));
    }
}
