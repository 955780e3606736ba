//! LIST: selectors, `limit`/`continue` paging pinned to one etcd revision (a compacted
//! revision is a 410), `resourceVersionMatch=Exact`.

use base64::Engine;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::resources::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector, Selectors};
use crate::state::{State, from_storage};
use crate::store::StoreError;
use crate::verbs::{Target, store_err};

/// List parameters.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// `labelSelector`.
    pub label_selector: String,
    /// `fieldSelector`.
    pub field_selector: String,
    /// `limit` (0 = no limit).
    pub limit: i64,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: String,
    /// `resourceVersionMatch`.
    pub resource_version_match: String,
}

/// Parses both selectors for a resource.
pub fn selectors(info: &ResourceInfo, opts: &ListOptions) -> Result<Selectors, ApiError> {
    Ok(Selectors {
        labels: LabelSelector::parse(&opts.label_selector)?,
        fields: FieldSelector::parse(&opts.field_selector, &info.field_selectable())?,
    })
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: i64,
    start: String,
}

/// LIST a collection, honouring selectors, `limit`/`continue` and `resourceVersionMatch=Exact`.
pub async fn list(state: &State, t: &Target, opts: &ListOptions) -> Result<Value, ApiError> {
    let info = &t.info;
    let sel = selectors(info, opts)?;
    let prefix = info.collection_prefix(state.prefix(), t.namespace.as_deref());
    let (mut revision, mut start) = match &opts.continue_token {
        Some(tok) if !tok.is_empty() => {
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(tok)
                .map_err(|_| ApiError::bad_request("continue key is not valid"))?;
            let tok: ContinueToken = serde_json::from_slice(&raw)
                .map_err(|_| ApiError::bad_request("continue key is not valid"))?;
            if !tok.start.starts_with(&prefix) {
                return Err(ApiError::bad_request("continue key is not valid"));
            }
            (tok.rv, Some(tok.start))
        }
        _ => {
            let rv = if opts.resource_version_match == "Exact" {
                opts.resource_version.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "invalid resource version {:?}",
                        opts.resource_version
                    ))
                })?
            } else {
                0
            };
            (rv, None)
        }
    };
    let mut items = Vec::new();
    let mut next_start: Option<String> = None;
    loop {
        let page = state
            .store
            .list(&prefix, start.as_deref(), revision, if opts.limit > 0 { opts.limit } else { 0 })
            .await
            .map_err(|e| match e {
                StoreError::Compacted { .. } if opts.continue_token.is_some() => ApiError {
                    code: 410,
                    reason: "Expired",
                    message: "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
                    details: None,
                },
                other => store_err(other),
            })?;
        revision = page.revision;
        let last_key = page.items.last().map(|s| s.key.clone());
        for s in page.items {
            let obj = from_storage(info, s.object);
            if sel.matches(&obj) {
                items.push(obj);
            }
        }
        match (page.more, last_key) {
            (true, Some(k)) => {
                let next = format!("{k}\0");
                if opts.limit > 0 && items.len() as i64 >= opts.limit {
                    next_start = Some(next);
                    break;
                }
                start = Some(next);
            }
            _ => break,
        }
    }
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if let Some(start) = next_start {
        let tok = serde_json::to_vec(&ContinueToken {
            rv: revision,
            start,
        })
        .unwrap_or_default();
        metadata["continue"] =
            Value::String(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tok));
    }
    Ok(json!({
        "kind": format!("{}List", info.kind),
        "apiVersion": info.api_version(),
        "metadata": metadata,
        "items": items,
    }))
}
