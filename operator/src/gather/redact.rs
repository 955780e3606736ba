//! The last guard before a gather bundle is written: no file may hold private-key material,
//! whatever encoding carried it there. Nothing the bundle reads should hold a key; these
//! functions are the guard if something does.
//!
//! Two passes, both removing a key with everything around it that belongs to it:
//! - [`redact_value`] walks every string of a JSON value before it is serialized, so a key in
//!   an Event's message or a Secret-like `data` field is seen decoded (real newlines, no
//!   escapes).
//! - [`redact`] reads any file's text as written (logs, tables, the serialized JSON) as a
//!   backstop. It matches on a view where escapes (`\n`, `\u002d`, `\x2d`, with any number of
//!   backslashes in front) stand for the character they encode, so the PEM markers are found in
//!   raw text, JSON- or Go-escaped strings and YAML alike; what it removes is mapped back onto
//!   the bytes as written.
//!
//! What counts as key material: a PEM block whose label holds `PRIVATE KEY` (from `-----BEGIN`
//! to its `-----END … PRIVATE KEY-----`, or to the end of the text when that is missing), and a
//! base64 string (standard or URL-safe, possibly wrapped over lines) whose decoded bytes hold
//! `PRIVATE KEY`, also when base64-encoded twice.

use std::ops::Range;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// What stands where a key was.
pub const MARKER: &str = "[private key removed by etcd-operator gather]";

/// Shortest base64 run worth decoding: `-----BEGIN PRIVATE KEY` is 22 bytes, 30 characters.
const MIN_BASE64: usize = 28;
/// How many base64 layers are looked through.
const BASE64_DEPTH: u8 = 2;

/// Replaces every private key in `text` with [`MARKER`]; returns the text and how many were
/// removed.
pub fn redact(text: &str) -> (String, usize) {
    let view = View::of(text);
    let mut found = pem_blocks(&view.text);
    found.extend(base64_blocks(&view.text, BASE64_DEPTH));
    if found.is_empty() {
        return (text.to_owned(), 0);
    }
    found.sort_by_key(|r| r.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut removed = 0;
    for r in found {
        let (start, end) = (view.origin(r.start), view.origin(r.end));
        if start < at {
            // Inside what was removed already (a PEM block wrapped in base64 text, say).
            at = at.max(end);
            continue;
        }
        out.push_str(&text[at..start]);
        out.push_str(MARKER);
        removed += 1;
        at = end;
    }
    out.push_str(&text[at..]);
    (out, removed)
}

/// Redacts every string (and object key) of `value` in place; returns how many keys were
/// removed.
pub fn redact_value(value: &mut serde_json::Value) -> usize {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            let (text, n) = redact(s);
            if n > 0 {
                *s = text;
            }
            n
        }
        Value::Array(items) => items.iter_mut().map(redact_value).sum(),
        Value::Object(map) => {
            let mut removed = 0;
            let entries = std::mem::take(map);
            for (key, mut v) in entries {
                let (key, n) = redact(&key);
                removed += n + redact_value(&mut v);
                map.insert(key, v);
            }
            removed
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
}

/// A text with its escapes decoded, and where each byte of it came from in the original.
struct View {
    text: String,
    /// `from[i]`: the offset in the original of the character holding byte `i` of `text`.
    from: Vec<usize>,
    len: usize,
}

impl View {
    fn of(original: &str) -> Self {
        let mut view = View {
            text: String::with_capacity(original.len()),
            from: Vec::with_capacity(original.len()),
            len: original.len(),
        };
        let bytes = original.as_bytes();
        let mut chars = original.char_indices();
        while let Some((i, c)) = chars.next() {
            if c == '\\'
                && let Some((decoded, width)) = unescape(bytes, i)
            {
                view.push(decoded, i);
                // Skip the rest of the escape (all ASCII, one char per byte).
                for _ in 1..width {
                    chars.next();
                }
                continue;
            }
            view.push(c, i);
        }
        view
    }

    fn push(&mut self, c: char, origin: usize) {
        self.text.push(c);
        self.from.extend(std::iter::repeat_n(origin, c.len_utf8()));
    }

    /// The offset in the original where byte `i` of the view begins (the end for `i == len`).
    fn origin(&self, i: usize) -> usize {
        self.from.get(i).copied().unwrap_or(self.len)
    }
}

/// The escape starting at `at` (one or more backslashes, then `n`, `r`, `t`, `/`, `uXXXX` or
/// `xXX` naming an ASCII character): the character and the escape's length in bytes.
fn unescape(bytes: &[u8], at: usize) -> Option<(char, usize)> {
    let slashes = bytes[at..].iter().take_while(|b| **b == b'\\').count();
    let kind = at + slashes;
    let hex = |from: usize, n: usize| -> Option<char> {
        let digits = bytes.get(from..from + n)?;
        let s = std::str::from_utf8(digits).ok()?;
        let code = u32::from_str_radix(s, 16).ok()?;
        char::from_u32(code).filter(char::is_ascii)
    };
    let (c, width) = match bytes.get(kind)? {
        b'n' | b'r' => ('\n', 1),
        b't' => ('\t', 1),
        b'/' => ('/', 1),
        b'u' => (hex(kind + 1, 4)?, 5),
        b'x' => (hex(kind + 1, 2)?, 3),
        _ => return None,
    };
    Some((c, slashes + width))
}

/// The PEM private-key blocks of `text`.
fn pem_blocks(text: &str) -> Vec<Range<usize>> {
    const BEGIN: &str = "-----BEGIN ";
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(BEGIN) {
        let start = from + i;
        let label_at = start + BEGIN.len();
        let label = label(&text[label_at..]);
        if !label.contains("PRIVATE KEY") {
            from = label_at;
            continue;
        }
        let end = block_end(text, label_at + label.len()).unwrap_or(text.len());
        found.push(start..end);
        from = end;
    }
    found
}

/// Where the first `-----END … PRIVATE KEY-----` after `from` ends.
fn block_end(text: &str, from: usize) -> Option<usize> {
    const END: &str = "-----END ";
    let mut at = from;
    while let Some(i) = text[at..].find(END) {
        let label_at = at + i + END.len();
        let label = label(&text[label_at..]);
        let after = label_at + label.len();
        if label.contains("PRIVATE KEY") {
            let dashes = text[after..].bytes().take(5).take_while(|b| *b == b'-');
            return Some(after + dashes.count());
        }
        at = after;
    }
    None
}

/// The PEM label at the start of `text`: capitals, digits and spaces.
fn label(text: &str) -> &str {
    let n = text
        .bytes()
        .take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b' ')
        .count();
    &text[..n]
}

fn is_base64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_')
}

/// The base64 strings of `text` whose decoded bytes hold key material (looking through `depth`
/// layers).
fn base64_blocks(text: &str, depth: u8) -> Vec<Range<usize>> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !is_base64(bytes[i]) {
            i += 1;
            continue;
        }
        let (end, encoded) = base64_run(bytes, i);
        if encoded.len() >= MIN_BASE64 && holds_key(&decode(&encoded), depth) {
            found.push(i..end);
        }
        i = end.max(i + 1);
    }
    found
}

/// The base64 string starting at `start`: where it ends and its characters without the
/// whitespace between wrapped lines. A string is wrapped when its first line is a whole number
/// of 4-character groups, at least 16 long, and the lines after it are as long (the last one
/// may be shorter), each alone on its line.
fn base64_run(bytes: &[u8], start: usize) -> (usize, Vec<u8>) {
    let mut encoded = Vec::new();
    let mut at = start;
    let mut width = None;
    let mut last_end = start;
    loop {
        let chunk = bytes[at..].iter().take_while(|b| is_base64(**b)).count();
        if width.is_some_and(|w| chunk > w) {
            // Longer than the lines before it: not their continuation.
            return (last_end, encoded);
        }
        let end = at + chunk;
        let padding = bytes[end..]
            .iter()
            .take(2)
            .take_while(|b| **b == b'=')
            .count();
        let space = bytes[end + padding..]
            .iter()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
        let first = *width.get_or_insert(chunk);
        let wraps = padding == 0 && chunk == first && chunk >= 16 && chunk % 4 == 0;
        encoded.extend_from_slice(&bytes[at..end]);
        last_end = end + padding;
        let gap = &bytes[last_end..last_end + space];
        let next = last_end + space;
        if wraps && gap.contains(&b'\n') && whole_line(bytes, next) {
            at = next;
        } else {
            return (last_end, encoded);
        }
    }
}

/// Whether a base64 line starts at `at` and fills the rest of its line (or of its quoted
/// string): what follows the characters and their padding is only blanks up to a line end, a
/// quote or the end of the text.
fn whole_line(bytes: &[u8], at: usize) -> bool {
    let chunk = bytes[at..].iter().take_while(|b| is_base64(**b)).count();
    if chunk == 0 {
        return false;
    }
    let rest = bytes[at + chunk..].iter().skip_while(|b| **b == b'=');
    let mut rest = rest.skip_while(|b| matches!(b, b' ' | b'\t'));
    matches!(rest.next(), None | Some(b'\n' | b'\r' | b'"' | b'\''))
}

/// Standard or URL-safe base64 without regard to padding; what cannot be decoded is empty.
fn decode(encoded: &[u8]) -> Vec<u8> {
    let config = GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true);
    let engine = GeneralPurpose::new(&base64::alphabet::STANDARD, config);
    let mut standard: Vec<u8> = encoded
        .iter()
        .map(|b| match b {
            b'-' => b'+',
            b'_' => b'/',
            b => *b,
        })
        .collect();
    if standard.len() % 4 == 1 {
        standard.pop();
    }
    engine.decode(standard).unwrap_or_default()
}

fn holds_key(decoded: &[u8], depth: u8) -> bool {
    if decoded.is_empty() {
        return false;
    }
    let text = String::from_utf8_lossy(decoded);
    let view = View::of(&text);
    view.text.contains("PRIVATE KEY")
        || (depth > 1 && !base64_blocks(&view.text, depth - 1).is_empty())
}

#[cfg(test)]
#[path = "redact_tests.rs"]
mod tests;
