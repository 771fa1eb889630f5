//! Which engine a server is, from what its identifying routes answer.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The kinds of upstream engine; `auto` is found from the server's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamKind {
    #[default]
    Auto,
    LlamaServer,
    Vllm,
    Sglang,
}

/// The bodies of a server's identifying routes that answered 200 with JSON (`None`: any other
/// answer).
#[derive(Debug, Clone, Default)]
pub struct Probes {
    /// `GET /props`: llama-server's, with `build_info` and `total_slots`.
    pub props: Option<Value>,
    /// `GET /server_info`: SGLang's, with `version` and `internal_states` (0.5.23; no other
    /// engine has the route).
    pub server_info: Option<Value>,
    /// `GET /version`: vLLM's, `{"version": "..."}` alone (0.20.2; SGLang 0.5.23 and
    /// llama-server b11434 answer 404).
    pub version: Option<Value>,
    /// `GET /v1/models`: `data[].owned_by` is `llamacpp`, `vllm` or `sglang` by default.
    pub models: Option<Value>,
}

/// The kind the probes show, `None` if none names one. Each engine's own route first (only
/// that engine answers it with those keys), then `/v1/models`' `owned_by`, which a server
/// started with a model alias or behind a gateway may not keep.
pub fn detect_kind(probes: &Probes) -> Option<UpstreamKind> {
    let has = |body: &Option<Value>, key: &str| body.as_ref().is_some_and(|b| b.get(key).is_some());
    if has(&probes.props, "build_info") && has(&probes.props, "total_slots") {
        return Some(UpstreamKind::LlamaServer);
    }
    if has(&probes.server_info, "version") && has(&probes.server_info, "internal_states") {
        return Some(UpstreamKind::Sglang);
    }
    let version_alone = probes
        .version
        .as_ref()
        .and_then(Value::as_object)
        .is_some_and(|o| o.len() == 1 && o.get("version").is_some_and(Value::is_string));
    if version_alone {
        return Some(UpstreamKind::Vllm);
    }
    let owner = probes
        .models
        .as_ref()
        .and_then(|m| m.get("data")?.get(0)?.get("owned_by")?.as_str());
    match owner {
        Some("llamacpp") => Some(UpstreamKind::LlamaServer),
        Some("vllm") => Some(UpstreamKind::Vllm),
        Some("sglang") => Some(UpstreamKind::Sglang),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::load::tests::fixture;
    use super::*;

    fn json(path: &str) -> Option<Value> {
        Some(serde_json::from_str(&fixture(path)).expect("a JSON fixture"))
    }

    #[test]
    fn each_engine_is_known_by_its_own_route() {
        let llama = Probes {
            props: json("llama-server-b11434/props.json"),
            ..Probes::default()
        };
        assert_eq!(detect_kind(&llama), Some(UpstreamKind::LlamaServer));
        let sglang = Probes {
            server_info: json("sglang-0.5.23/server_info.json"),
            ..Probes::default()
        };
        assert_eq!(detect_kind(&sglang), Some(UpstreamKind::Sglang));
        let vllm = Probes {
            version: json("vllm-0.20.2/version.json"),
            ..Probes::default()
        };
        assert_eq!(detect_kind(&vllm), Some(UpstreamKind::Vllm));
        // an engine's own route wins over a gateway's name for the owner
        let behind_a_gateway = Probes {
            props: json("llama-server-b11434/props.json"),
            models: json("vllm-0.20.2/models.json"),
            ..Probes::default()
        };
        assert_eq!(
            detect_kind(&behind_a_gateway),
            Some(UpstreamKind::LlamaServer)
        );
    }

    #[test]
    fn without_its_own_route_an_engine_is_known_by_the_models_owner_and_else_not_at_all() {
        let vllm = Probes {
            models: json("vllm-0.20.2/models.json"),
            ..Probes::default()
        };
        assert_eq!(detect_kind(&vllm), Some(UpstreamKind::Vllm));
        let llama = Probes {
            models: json("llama-server-b11434/models.json"),
            ..Probes::default()
        };
        assert_eq!(detect_kind(&llama), Some(UpstreamKind::LlamaServer));
        // a gateway's own name for the owner says nothing
        let gateway = Probes {
            models: Some(serde_json::json!({"data": [{"id": "m", "owned_by": "organization"}]})),
            ..Probes::default()
        };
        assert_eq!(detect_kind(&gateway), None);
        // a /version that says more than its version is not vLLM's
        let other = Probes {
            version: Some(serde_json::json!({"version": "1.2", "name": "gateway"})),
            ..Probes::default()
        };
        assert_eq!(detect_kind(&other), None);
    }

    #[test]
    fn kinds_are_named_as_the_settings_name_them() {
        let names: Vec<String> = [
            UpstreamKind::Auto,
            UpstreamKind::LlamaServer,
            UpstreamKind::Vllm,
            UpstreamKind::Sglang,
        ]
        .iter()
        .map(|k| {
            serde_json::to_value(k)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
        assert_eq!(names, ["auto", "llama-server", "vllm", "sglang"]);
    }
}
