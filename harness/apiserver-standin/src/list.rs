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
    let (revision, start) = list_start(opts, &prefix)?;
    let Collected {
        revision,
        items,
        next_start,
    } = collect(state, info, &sel, opts, &prefix, revision, start).await?;
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if let Some(start) = next_start {
        metadata["continue"] = Value::String(continue_token(revision, start));
    }
    Ok(json!({
        "kind": format!("{}List", info.kind),
        "apiVersion": info.api_version(),
        "metadata": metadata,
        "items": items,
    }))
}

/// Where a list starts: (revision, first key) from the `continue` token, else the
/// `resourceVersionMatch=Exact` revision (0 = the latest) from the first key.
fn list_start(opts: &ListOptions, prefix: &str) -> Result<(i64, Option<String>), ApiError> {
    match &opts.continue_token {
        Some(tok) if !tok.is_empty() => {
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(tok)
                .map_err(|_| ApiError::bad_request("continue key is not valid"))?;
            let tok: ContinueToken = serde_json::from_slice(&raw)
                .map_err(|_| ApiError::bad_request("continue key is not valid"))?;
            if !tok.start.starts_with(prefix) {
                return Err(ApiError::bad_request("continue key is not valid"));
            }
            Ok((tok.rv, Some(tok.start)))
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
            Ok((rv, None))
        }
    }
}

/// What the pages of one list call gathered.
struct Collected {
    /// The revision the list was read at.
    revision: i64,
    /// The matching objects.
    items: Vec<Value>,
    /// Where the next page starts, when `limit` cut the list short.
    next_start: Option<String>,
}

/// Reads pages from `start` at `revision` until `limit` matching objects are gathered or the
/// collection ends.
async fn collect(
    state: &State,
    info: &ResourceInfo,
    sel: &Selectors,
    opts: &ListOptions,
    prefix: &str,
    mut revision: i64,
    mut start: Option<String>,
) -> Result<Collected, ApiError> {
    let mut items = Vec::new();
    let mut next_start: Option<String> = None;
    loop {
        let page = state
            .store
            .list(
                prefix,
                start.as_deref(),
                revision,
                if opts.limit > 0 { opts.limit } else { 0 },
            )
            .await
            .map_err(|e| list_error(opts, e))?;
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
    Ok(Collected {
        revision,
        items,
        next_start,
    })
}

/// The API error for a failed page read: 410 `Expired` for a compacted `continue` revision.
fn list_error(opts: &ListOptions, e: StoreError) -> ApiError {
    match e {
        StoreError::Compacted { .. } if opts.continue_token.is_some() => ApiError {
            code: 410,
            reason: "Expired",
            message: "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
            details: None,
        },
        other => store_err(other),
    }
}

/// The `continue` token for the next page: the revision and first key, base64url-encoded JSON.
fn continue_token(revision: i64, start: String) -> String {
    let tok = serde_json::to_vec(&ContinueToken {
        rv: revision,
        start,
    })
    .unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tok)
}
