//! `/version` against a loopback server that answers with canned bytes: every framing HTTP/1.1
//! allows, and the answers that are not a version.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::*;

const LIMIT: Duration = Duration::from_secs(5);

/// A server on a free loopback port that takes one connection, reads the request head, writes
/// `answer` and closes; it returns the request head it read.
async fn serve_once(answer: Vec<u8>) -> (MemberUrl, JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let task = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && socket.read(&mut byte).await.unwrap() == 1 {
            head.push(byte[0]);
        }
        socket.write_all(&answer).await.unwrap();
        socket.shutdown().await.unwrap();
        String::from_utf8(head).unwrap()
    });
    (url, task)
}

/// `pieces` as a chunked body, each piece its own chunk (sizes in hex, one with an extension).
fn chunked(pieces: &[&str]) -> Vec<u8> {
    let mut out =
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for (i, p) in pieces.iter().enumerate() {
        let ext = if i == 1 { ";note=x" } else { "" };
        out.extend(format!("{:x}{ext}\r\n{p}\r\n", p.len()).into_bytes());
    }
    out.extend(b"0\r\n\r\n");
    out
}

async fn version_of(answer: Vec<u8>) -> Result<VersionInfo, ClientError> {
    let (url, server) = serve_once(answer).await;
    let said = get(&url, None, LIMIT).await;
    let head = server.await.unwrap();
    assert!(head.starts_with("GET /version HTTP/1.1\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("host: {}\r\n", url.authority())),
        "{head}"
    );
    said
}

/// A chunked answer whose chunks cut the JSON object apart (etcd's Go server chunks an answer it
/// streams): the old hand-written GET, which took "what is between the braces", read the chunk
/// sizes into the JSON.
#[tokio::test]
async fn a_chunked_answer_split_inside_the_object_is_decoded() {
    let answer = chunked(&[
        r#"{"etcdserver":"3.5.1","#,
        r#""etcdcluster":"#,
        r#""3.5.0"}"#,
    ]);
    assert_eq!(
        version_of(answer).await.unwrap(),
        VersionInfo {
            server: "3.5.1".into(),
            cluster: "3.5.0".into()
        }
    );
}

#[tokio::test]
async fn a_content_length_answer_and_one_read_to_the_close_are_decoded() {
    let body = r#"{"etcdserver":"3.4.23","etcdcluster":"not_decided"}"#;
    let sized = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(
        version_of(sized.into_bytes()).await.unwrap().cluster,
        "not_decided"
    );
    let to_close = format!("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{body}");
    assert_eq!(
        version_of(to_close.into_bytes()).await.unwrap().server,
        "3.4.23"
    );
}

#[tokio::test]
async fn answers_that_are_no_version_are_named() {
    let not_found =
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 18\r\n\r\n404 page not found".to_vec();
    let e = version_of(not_found).await.unwrap_err().to_string();
    assert!(e.contains("404") && e.contains("page not found"), "{e}");
    let wrong_type = chunked(&[r#"{"etcdserver":3}"#]);
    let e = version_of(wrong_type).await.unwrap_err().to_string();
    assert!(
        e.contains("etcdserver") || e.contains("invalid type"),
        "{e}"
    );
    let garbage = b"SSH-2.0-OpenSSH_9.2\r\n\r\n".to_vec();
    match version_of(garbage).await.unwrap_err() {
        ClientError::Endpoint(f) => assert_eq!(f.kind, FailureKind::Unreachable, "{f:?}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_body_past_the_bound_is_refused() {
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
        MAX_ANSWER + 1
    )
    .into_bytes();
    answer.extend(std::iter::repeat_n(b' ', MAX_ANSWER + 1));
    let (url, server) = serve_once(answer).await;
    let e = get(&url, None, LIMIT).await.unwrap_err().to_string();
    assert!(e.contains("body"), "{e}");
    server.abort();
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url: MemberUrl = format!("http://{}", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let hold = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(socket);
    });
    match get(&url, None, Duration::from_millis(300))
        .await
        .unwrap_err()
    {
        ClientError::Endpoint(f) => assert_eq!(f.kind, FailureKind::Timeout, "{f:?}"),
        other => panic!("{other:?}"),
    }
    hold.abort();
}

#[tokio::test]
async fn http_get_gives_the_status_line_and_the_body() {
    let (url, server) = serve_once(chunked(&["etcd_server_", "has_leader 1\n"])).await;
    let (status, body) = http_get(&url, "/metrics", None, LIMIT).await.unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(body, "etcd_server_has_leader 1\n");
    assert!(
        server
            .await
            .unwrap()
            .starts_with("GET /metrics HTTP/1.1\r\n")
    );
}
