//! Connection limits of the real HTTP server, checked in virtual time (no timed real-time test):
//! a client that sends no request head within `HEADER_READ_TIMEOUT_MS` is disconnected, one that
//! speaks in time is answered.
#![cfg(madsim)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vigil::api::HEADER_READ_TIMEOUT_MS;
use vigil_world::harness::{simulate, RuntimeNode};

const RUNTIME_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1));
const CLIENT_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 100));

/// Connects, stays silent for `silent_ms`, then sends a request; returns what the server said
/// (empty if it had closed the connection).
async fn silent_then_request(addr: SocketAddr, silent_ms: u64) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    tokio::time::sleep(Duration::from_millis(silent_ms)).await;
    let request = b"GET /v1/health HTTP/1.1\r\nhost: vigil\r\nconnection: close\r\n\r\n";
    // The write may fail outright on a connection the server has closed; that counts as closed.
    if stream.write_all(request).await.is_err() || stream.flush().await.is_err() {
        return String::new();
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn a_silent_connection_is_closed_after_the_header_read_timeout() {
    let result = simulate(7, Duration::from_secs(3_600), |recorder| async move {
        let node = RuntimeNode::start(
            &recorder,
            "vigil-1",
            RUNTIME_IP,
            0,
            false,
            7,
            None,
            Vec::new(),
            vigil_world::harness::SIM_SNAPSHOTS,
        );
        let addr = node.addr;
        let client = vigil_world::harness::build_node(
            madsim::runtime::Handle::current()
            .create_node()
            .name("client")
            .ip(CLIENT_IP),
        );
        let (in_time, too_late) = client
            .spawn(async move {
                // Let the node finish starting.
                tokio::time::sleep(Duration::from_secs(1)).await;
                let in_time = silent_then_request(addr, HEADER_READ_TIMEOUT_MS / 2).await;
                let too_late = silent_then_request(addr, HEADER_READ_TIMEOUT_MS + 5_000).await;
                (in_time, too_late)
            })
            .await
            .expect("client task");
        assert!(
            in_time.starts_with("HTTP/1.1 200"),
            "a prompt client was not served: {in_time:?}"
        );
        assert!(in_time.contains(r#""status":"ok""#), "{in_time:?}");
        assert!(
            !too_late.contains("200 OK"),
            "a silent client was still served: {too_late:?}"
        );
    });
    assert!(result.violation.is_none(), "{:?}", result.violation);
}
