//! The result as one JSON line, bounded so the kubelet keeps all of it.
//!
//! The kubelet keeps at most 4096 bytes of a container's termination message, and the operator
//! reads why a node's etcd is blocked from there. A reason that quotes a long env entry would
//! be cut mid-JSON and unreadable, so [`json_line`] shortens the reason (at a character
//! boundary, with a visible marker) until the whole line fits; it is always a valid report.

use membership::{VERIFY_REPORT_VERSION, VerifyReport};

/// What the kubelet keeps of a termination message.
pub const MAX_MESSAGE_BYTES: usize = 4096;

const MARKER: &str = " [truncated]";

/// The JSON line for `result`, at most [`MAX_MESSAGE_BYTES`] bytes.
pub fn json_line(result: &VerifyReport) -> String {
    let json = encode(result);
    if json.len() <= MAX_MESSAGE_BYTES {
        return json;
    }
    // Escaping can make the JSON several times longer than the text, so search for the longest
    // prefix of the reason that fits rather than cutting by the excess.
    let text = result.reason.as_str();
    let with = |keep: usize| {
        encode(&VerifyReport {
            reason: format!("{}{MARKER}", &text[..keep]),
            ..result.clone()
        })
    };
    let (mut fits, mut too_long) = (0, text.len());
    while too_long - fits > 1 {
        let mut mid = fits + (too_long - fits) / 2;
        while !text.is_char_boundary(mid) {
            mid -= 1;
        }
        if mid <= fits {
            break;
        }
        if with(mid).len() <= MAX_MESSAGE_BYTES {
            fits = mid;
        } else {
            too_long = mid;
        }
    }
    let line = with(fits);
    if line.len() <= MAX_MESSAGE_BYTES {
        line
    } else {
        // The other fields alone are too long (they never are: an id and a path).
        encode(&VerifyReport {
            reason: "result too long to report".into(),
            member_id: None,
            archived: None,
            ..result.clone()
        })
    }
}

fn encode(result: &VerifyReport) -> String {
    serde_json::to_string(result).unwrap_or_else(|e| {
        format!(
            r#"{{"version":{VERIFY_REPORT_VERSION},"decision":"block","code":"Internal","reason":"cannot encode the result: {e}","member_id":null,"archived":null}}"#
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use membership::BlockCode;

    #[test]
    fn long_reasons_are_cut_to_fit_and_stay_json() {
        for unit in ["x", "\"", "é", "\u{1F600}", "\\", "\u{1}"] {
            let result =
                VerifyReport::block(BlockCode::StaleRevision, unit.repeat(100_000), None, None);
            let line = json_line(&result);
            assert!(line.len() <= MAX_MESSAGE_BYTES, "{unit:?}: {}", line.len());
            assert!(
                line.len() > MAX_MESSAGE_BYTES - 16,
                "{unit:?}: cut too much"
            );
            let back = VerifyReport::read(&line, 1);
            assert_eq!(back.code, Some(BlockCode::StaleRevision), "{line}");
            assert!(back.reason.ends_with(MARKER));
        }
    }

    #[test]
    fn short_reasons_are_kept_whole() {
        let result =
            VerifyReport::block(BlockCode::DataDirLost, "data dir lost".into(), None, None);
        assert_eq!(
            json_line(&result),
            r#"{"version":1,"decision":"block","code":"DataDirLost","reason":"data dir lost","member_id":null,"archived":null}"#
        );
    }
}
