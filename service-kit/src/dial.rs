//! Connecting over TCP to a name that resolves to several addresses.
//!
//! Why: `TcpStream::connect(name)` tries the addresses one after another,
//! each until the kernel gives up on it — minutes for an address whose
//! packets are dropped rather than refused (a replica's host gone, an IPv6
//! route that leads nowhere). Under the client channel's connect timeout
//! that meant a dead first address used the whole timeout, the healthy ones
//! after it were never tried, and a participant with live replicas looked
//! down on every attempt. Here, as in RFC 8305 ("Happy Eyeballs"), the next
//! address is tried [`STAGGER`] after the previous one if that one has not
//! connected yet, or at once when it failed; the first connection wins and
//! the attempts still running are dropped (closing their sockets).
//!
//! The addresses are tried in the resolver's order (`getaddrinfo` sorts
//! them by RFC 6724 preference); a name with one address — a container
//! name, `127.0.0.1` — is connected to exactly as before.

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpStream;

/// How long an address has to connect before the next one is tried too.
pub const STAGGER: Duration = Duration::from_millis(250);

/// A TCP connection to `host:port`: every address it resolves to, tried as
/// the module says. Errors when the name resolves to nothing or every
/// address failed (with the last address's error). The caller bounds the
/// whole with its connect timeout.
pub async fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
    first_to_connect(addresses, STAGGER, TcpStream::connect).await
}

/// The first of `addresses` that `connect` connects, each started
/// `stagger` after the one before it (or as soon as that one failed).
async fn first_to_connect<C, F, S>(
    addresses: Vec<SocketAddr>,
    stagger: Duration,
    connect: C,
) -> io::Result<S>
where
    C: Fn(SocketAddr) -> F,
    F: Future<Output = io::Result<S>>,
{
    let count = addresses.len();
    let mut waiting = addresses.into_iter();
    let mut running = FuturesUnordered::new();
    let mut last_error = None;
    loop {
        if running.is_empty() {
            match waiting.next() {
                Some(address) => running.push(connect(address)),
                None => {
                    return Err(match last_error {
                        Some(error) if count > 1 => io::Error::new(
                            io::ErrorKind::ConnectionRefused,
                            format!("none of {count} addresses connected; the last: {error}"),
                        ),
                        Some(error) => error,
                        None => io::Error::new(
                            io::ErrorKind::NotFound,
                            "the name resolved to no address",
                        ),
                    });
                }
            }
        }
        let more_waiting = waiting.len() > 0;
        tokio::select! {
            Some(outcome) = running.next() => match outcome {
                Ok(stream) => return Ok(stream),
                Err(error) => {
                    last_error = Some(error);
                    if let Some(address) = waiting.next() {
                        running.push(connect(address));
                    }
                }
            },
            () = tokio::time::sleep(stagger), if more_waiting => {
                if let Some(address) = waiting.next() {
                    running.push(connect(address));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::net::TcpListener;

    fn address(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// A port nothing listens on (a listener bound, then closed).
    async fn closed_port() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn a_refused_address_is_passed_over_at_once_for_the_next() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live = listener.local_addr().unwrap();
        let dead = address(closed_port().await);
        let started = tokio::time::Instant::now();
        let stream = first_to_connect(vec![dead, live], Duration::from_secs(30), |a| {
            TcpStream::connect(a)
        })
        .await
        .expect("the live address connects");
        assert_eq!(stream.peer_addr().unwrap(), live);
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "a refusal starts the next address without waiting for the stagger"
        );
        let (_accepted, _) = listener.accept().await.unwrap();
    }

    /// Paused time: the stagger passes as soon as every task waits.
    #[tokio::test(start_paused = true)]
    async fn an_address_that_never_answers_does_not_hold_up_the_next() {
        let (blackhole, live) = (address(1), address(2));
        let tried = Mutex::new(Vec::new());
        let started = tokio::time::Instant::now();
        let connected = first_to_connect(vec![blackhole, live], STAGGER, |a| {
            tried.lock().unwrap().push((a, started.elapsed()));
            async move {
                if a == blackhole {
                    std::future::pending::<()>().await;
                }
                Ok::<_, io::Error>(a)
            }
        })
        .await
        .unwrap();
        assert_eq!(connected, live);
        assert_eq!(
            *tried.lock().unwrap(),
            [(blackhole, Duration::ZERO), (live, STAGGER)],
            "the next address one stagger later, the first still running"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_address_to_connect_wins_even_after_others_started() {
        let (slow, fast) = (address(1), address(2));
        let connected = first_to_connect(vec![slow, fast], STAGGER, |a| async move {
            let delay = if a == slow { STAGGER * 4 } else { STAGGER };
            tokio::time::sleep(delay).await;
            Ok::<_, io::Error>(a)
        })
        .await
        .unwrap();
        assert_eq!(connected, fast, "started second, connected first");
    }

    #[tokio::test]
    async fn every_address_failing_is_one_error_naming_how_many() {
        let dead = [address(closed_port().await), address(closed_port().await)];
        let error = first_to_connect(dead.to_vec(), STAGGER, TcpStream::connect)
            .await
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("none of 2 addresses connected"),
            "{error}"
        );
        let error = first_to_connect(dead[..1].to_vec(), STAGGER, TcpStream::connect)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionRefused, "{error}");
        let error = first_to_connect(Vec::new(), STAGGER, TcpStream::connect)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound, "{error}");
    }

    #[tokio::test]
    async fn a_name_is_resolved_and_connected() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stream = connect("localhost", port).await;
        // `localhost` may resolve to ::1 first, where nothing listens: the
        // refusal passes it over for 127.0.0.1.
        assert_eq!(stream.unwrap().peer_addr().unwrap(), address(port));
    }
}
