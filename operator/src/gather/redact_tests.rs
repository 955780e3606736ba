use super::*;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

/// A real PKCS#8 PEM key, as rcgen writes it.
fn key_pem() -> String {
    rcgen::KeyPair::generate().unwrap().serialize_pem()
}

/// A line of the key's body, which must not survive either.
fn body_line(pem: &str) -> String {
    pem.lines().nth(1).unwrap().to_owned()
}

fn assert_no_key(out: &str, pem: &str) {
    assert!(!out.contains("PRIVATE KEY"), "{out}");
    assert!(!out.contains(&body_line(pem)), "{out}");
    let b64 = STANDARD.encode(pem);
    assert!(!out.contains(&b64[..40]), "{out}");
}

#[test]
fn private_keys_are_removed_wherever_they_are() {
    let text = "a\n-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\nb\n-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\nc \"-----BEGIN PRIVATE KEY-----\nMC4C\n-----END PRIVATE KEY-----\"\n";
    let (out, removed) = redact(text);
    assert_eq!(removed, 2);
    assert!(!out.contains("PRIVATE KEY-----"), "{out}");
    assert!(!out.contains("MHcC") && !out.contains("MC4C"), "{out}");
    assert!(out.contains("-----BEGIN CERTIFICATE-----\nMIIB"), "{out}");
    assert!(out.starts_with("a\n") && out.contains("\nb\n") && out.contains("c \""));
    // An unterminated key is cut to the end rather than kept.
    let (out, removed) = redact("x\n-----BEGIN RSA PRIVATE KEY-----\nMIIE");
    assert_eq!(
        (out.as_str(), removed),
        ("x\n[private key removed by etcd-operator gather]", 1)
    );
    assert_eq!(redact("no pem here").0, "no pem here");
}

#[test]
fn a_key_in_a_json_escaped_string_is_removed_and_the_json_stays_valid() {
    let pem = key_pem();
    let json = serde_json::json!({"note": pem, "reason": "Odd"}).to_string();
    assert!(
        json.contains("-----\\n"),
        "serde_json escapes the newline: {json}"
    );
    let (out, removed) = redact(&json);
    assert_eq!(removed, 1);
    assert_no_key(&out, &pem);
    let back: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The newline after the END line is the key's own and stays, escaped as it was.
    assert_eq!(back["note"], format!("{MARKER}\n"));
    assert_eq!(back["reason"], "Odd");
}

#[test]
fn escaped_dashes_and_escapes_of_escapes_do_not_hide_a_key() {
    // serde_json never escapes `-` or letters (checked here), but other writers may, and a
    // JSON document inside a JSON string doubles every backslash.
    assert_eq!(
        serde_json::to_string("-----BEGIN").unwrap(),
        "\"-----BEGIN\""
    );
    let pem = key_pem();
    let dashed = pem.replace('-', "\\u002d").replace('\n', "\\n");
    let (out, removed) = redact(&format!("{{\"msg\":\"{dashed}\"}}"));
    assert_eq!(removed, 1, "{out}");
    assert_no_key(&out, &pem);
    assert_eq!(out, format!("{{\"msg\":\"{MARKER}\\n\"}}"));
    let inner = serde_json::json!({"key": pem}).to_string();
    let outer = serde_json::json!({"log": inner}).to_string();
    assert!(outer.contains("\\\\n"), "{outer}");
    let (out, removed) = redact(&outer);
    assert_eq!(removed, 1, "{out}");
    assert_no_key(&out, &pem);
    let hex = pem.replace('-', "\\x2d").replace(' ', "\\u0020");
    assert_eq!(redact(&hex).1, 1);
}

#[test]
fn a_base64_data_field_holding_a_key_is_removed() {
    let pem = key_pem();
    let cert = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";
    let secret = serde_json::json!({
        "data": {"tls.key": STANDARD.encode(&pem), "ca.crt": STANDARD.encode(cert)}
    })
    .to_string();
    let (out, removed) = redact(&secret);
    assert_eq!(removed, 1, "{out}");
    assert_no_key(&out, &pem);
    assert!(
        out.contains(&STANDARD.encode(cert)),
        "a certificate stays: {out}"
    );
    // A bundle (certificate first, so the key is not aligned to the start), wrapped at 76
    // columns in YAML, URL-safe without padding, and encoded twice.
    let bundle = STANDARD.encode(format!("{cert}{pem}"));
    let wrapped: Vec<&str> = bundle
        .as_bytes()
        .chunks(76)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    let yaml = format!(
        "data:\n  tls.pem: |\n    {}\nkind: Secret\n",
        wrapped.join("\n    ")
    );
    let (out, removed) = redact(&yaml);
    assert_eq!(removed, 1, "{out}");
    assert!(
        out.ends_with(&format!("    {MARKER}\nkind: Secret\n")),
        "{out}"
    );
    // The same wrapped lines inside a JSON string, where the newlines are `\n`.
    let json = format!("{{\"pem\":\"{}\",\"n\":1}}", wrapped.join("\\n"));
    let (out, removed) = redact(&json);
    assert_eq!(out, format!("{{\"pem\":\"{MARKER}\",\"n\":1}}"));
    assert_eq!(removed, 1);
    for encoded in [
        URL_SAFE_NO_PAD.encode(&pem),
        STANDARD.encode(STANDARD.encode(&pem)),
    ] {
        let (out, removed) = redact(&format!("value={encoded} end"));
        assert_eq!(
            (out.as_str(), removed),
            (&*format!("value={MARKER} end"), 1)
        );
    }
}

#[test]
fn a_log_line_holding_a_key_is_removed() {
    let pem = key_pem();
    let escaped = serde_json::to_string(&pem).unwrap();
    let log = format!(
        "2026-11-25T10:00:00Z INFO started\n\
         {{\"level\":\"error\",\"msg\":\"bad key\",\"key\":{escaped}}}\n\
         2026-11-25T10:00:01Z WARN raw key follows\n{pem}2026-11-25T10:00:02Z INFO done\n"
    );
    let (out, removed) = redact(&log);
    assert_eq!(removed, 2, "{out}");
    assert_no_key(&out, &pem);
    assert!(
        out.contains(&format!("\"key\":\"{MARKER}\\n\"}}\n")),
        "{out}"
    );
    assert!(out.contains(&format!(
        "follows\n{MARKER}\n2026-11-25T10:00:02Z INFO done\n"
    )));
}

#[test]
fn strings_of_a_json_value_are_redacted_before_serializing() {
    let pem = key_pem();
    let mut event = serde_json::json!({
        "type": "Warning",
        "note": pem,
        "items": [{"data": {"k": STANDARD.encode(&pem)}}],
        "count": 3,
    });
    assert_eq!(redact_value(&mut event), 2);
    assert_eq!(event["note"], format!("{MARKER}\n"));
    assert_eq!(event["items"][0]["data"]["k"], MARKER);
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["count"], 3);
}

#[test]
fn text_without_keys_is_left_as_it_is() {
    let text = "plain words and a long identifier ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef0123456789 \
                C:\\\\new\\u0041 \\x zz aGVsbG8gd29ybGQgaGVsbG8gd29ybGQgaGVsbG8gd29ybGQ= ünïcode";
    assert_eq!(redact(text), (text.to_owned(), 0));
}
