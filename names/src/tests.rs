#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

#[test]
fn labels() {
    for good in ["a", "0", "my-name", "123-abc", &"a".repeat(63)] {
        assert_eq!(dns1123_label(good), Ok(()), "{good:?}");
    }
    for (bad, why) in [
        ("", NameError::Empty),
        ("A", NameError::NotLabel),
        ("-a", NameError::NotLabel),
        ("a-", NameError::NotLabel),
        ("a.b", NameError::Dots),
        ("a..b", NameError::NotLabel),
        ("a_b", NameError::NotLabel),
        ("é", NameError::NotLabel),
        (&"a".repeat(64), NameError::TooLong { max: 63 }),
    ] {
        assert_eq!(dns1123_label(bad), Err(why), "{bad:?}");
    }
}

#[test]
fn subdomains() {
    let long_part = format!("{}.b", "a".repeat(64));
    for good in [
        "a",
        "a.b",
        "cp-1.example.com",
        "a-b.c",
        &long_part,
        &"a".repeat(253),
    ] {
        assert_eq!(dns1123_subdomain(good), Ok(()), "{good:?}");
    }
    for (bad, why) in [
        ("", NameError::Empty),
        ("a-.b", NameError::NotSubdomain),
        ("a..b", NameError::NotSubdomain),
        (".a", NameError::NotSubdomain),
        ("a.", NameError::NotSubdomain),
        ("N1", NameError::NotSubdomain),
        ("n1,n2=http://x:1", NameError::NotSubdomain),
        (&"a".repeat(254), NameError::TooLong { max: 253 }),
    ] {
        assert_eq!(dns1123_subdomain(bad), Err(why), "{bad:?}");
    }
}

#[test]
fn qualified_names_and_label_values() {
    for good in [
        "a",
        "MyName",
        "my.name_x-1",
        "example.com/MyName",
        "node-role.kubernetes.io/control-plane",
    ] {
        assert_eq!(qualified_name(good), Ok(()), "{good:?}");
    }
    for (bad, why) in [
        ("", NameError::Empty),
        ("/x", NameError::EmptyPrefix),
        ("example.com/", NameError::Empty),
        (
            "Example.com/x",
            NameError::Prefix(Box::new(NameError::NotSubdomain)),
        ),
        ("a/b/c", NameError::TooManySlashes),
        ("-x", NameError::NotNamePart),
        ("x,y", NameError::NotNamePart),
        (&"v".repeat(64), NameError::PartTooLong { max: 63 }),
    ] {
        assert_eq!(qualified_name(bad), Err(why), "{bad:?}");
    }
    assert_eq!(label_value(""), Ok(()));
    assert_eq!(label_value("My_value.1"), Ok(()));
    assert_eq!(label_value("a=b"), Err(NameError::NotNamePart));
    assert_eq!(
        label_value(&"v".repeat(64)),
        Err(NameError::PartTooLong { max: 63 })
    );
}

#[test]
fn messages_are_kube_apiservers() {
    assert_eq!(
        NameError::TooLong { max: 253 }.api_message(),
        "must be no more than 253 characters"
    );
    assert!(
        NameError::NotSubdomain
            .api_message()
            .starts_with("a lowercase RFC 1123 subdomain must consist of")
    );
    assert!(label_value_message(&NameError::NotNamePart).starts_with("a valid label must be"));
    assert_eq!(
        NameError::Prefix(Box::new(NameError::NotSubdomain)).to_string(),
        "the prefix before '/': it must be lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit"
    );
}
