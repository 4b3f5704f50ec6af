//! The out-of-band exchange between a client and a server over TCP: one JSON document per line,
//! versioned. The client sends its `Hello` (every scenario parameter); the server compares it with
//! its own and answers with its `Hello` or a refusal naming the first parameter that differs and
//! both values (and both stop); then each side sends the endpoints of its QPs, connects them and
//! sends `Ready` (a barrier: neither side posts before the other's QPs can take its operations,
//! as perftest's handshake after connecting); at the end each sends `Done`. Bounded: a message is
//! at most [`MAX_MESSAGE`] bytes, and each has a deadline of its own (not each read: a peer that
//! trickles a byte a second does not keep the exchange alive); everything a peer sends that is
//! shown to the user is escaped ([`escape`]).
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

pub mod perftest;
mod rendezvous;
#[cfg(test)]
pub(crate) use rendezvous::Canned;
pub use rendezvous::Rendezvous;

/// The longest message either side accepts, in bytes (the largest real one, a hello, is well
/// under 1 KiB).
pub const MAX_MESSAGE: usize = 64 * 1024;

/// Text from a peer made safe to show: control characters (escape sequences, newlines) and
/// anything past 200 characters do not reach the terminal or a report as they are.
pub fn escape(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == 200 {
            out.push_str("...");
            break;
        }
        if c.is_control() || invisible(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Protocol name and version: a peer speaking another version is refused.
pub const PROTO: &str = "rdmaprobe-oob";
/// Protocol version (2: the `Ready` barrier after connecting).
pub const VERSION: u32 = 2;
/// Default TCP port (perftest's).
pub const DEFAULT_PORT: u16 = 18515;

/// Out-of-band failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OobError {
    /// Socket trouble (connect, accept, read, write), with the peer address.
    #[error("{what} {peer}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Address.
        peer: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The peer closed the connection or sent something that is not this protocol.
    #[error("peer {peer}: {why}")]
    Protocol {
        /// Address.
        peer: String,
        /// What was wrong.
        why: String,
    },
    /// No complete message from the peer within the deadline.
    #[error("no {awaiting} from {peer} within {secs} s")]
    Timeout {
        /// Address.
        peer: String,
        /// The deadline, seconds.
        secs: u64,
        /// What was awaited.
        awaiting: String,
    },
    /// The two ends were started with different parameters.
    #[error("the two ends disagree on {param}: this side has {ours}, the peer has {theirs}")]
    Mismatch {
        /// The parameter.
        param: String,
        /// Our value.
        ours: String,
        /// The peer's value.
        theirs: String,
    },
}

/// A connected peer.
pub struct Peer {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
    addr: String,
    /// The accepting side (the server) leads the handshake.
    leads: bool,
    /// The deadline of each message received.
    timeout: Duration,
}

/// A listening server socket, before its client comes.
pub struct Listener {
    l: TcpListener,
    here: String,
}

impl Listener {
    /// Listens on `addr` (an IP address; `0.0.0.0`: every IPv4 address) and `port` (0: one the
    /// system picks; [`Listener::local_addr`] says which).
    pub fn bind(addr: &str, port: u16) -> Result<Listener, OobError> {
        let here = format!("{addr}:{port}");
        let io = |what, source| OobError::Io {
            what,
            peer: here.clone(),
            source,
        };
        let ip: std::net::IpAddr = addr.parse().map_err(|e| {
            io(
                "listening on",
                std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("not an IP address: {e}")),
            )
        })?;
        let l = TcpListener::bind((ip, port)).map_err(|e| io("listening on", e))?;
        l.set_nonblocking(true).map_err(|e| io("listening on", e))?;
        let here = l.local_addr().map(|a| a.to_string()).unwrap_or(here);
        Ok(Listener { l, here })
    }

    /// The address and port it listens on (the real port when 0 was asked).
    pub fn local_addr(&self) -> &str {
        &self.here
    }

    /// Waits for one client, for up to `timeout`.
    pub fn accept(self, timeout: Duration) -> Result<Peer, OobError> {
        let io = |what, source| OobError::Io {
            what,
            peer: self.here.clone(),
            source,
        };
        let deadline = Instant::now() + timeout;
        loop {
            match self.l.accept() {
                Ok((s, a)) => {
                    s.set_nonblocking(false).map_err(|e| io("accepting on", e))?;
                    return Peer::from_stream(s, a.to_string(), timeout, true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if crate::signals::interrupted() {
                        return Err(OobError::Protocol {
                            peer: "no client yet".into(),
                            why: format!("the wait for a client on {} was interrupted", self.here),
                        });
                    }
                    if Instant::now() >= deadline {
                        return Err(io(
                            "no client within the deadline on",
                            std::io::Error::from(std::io::ErrorKind::TimedOut),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(io("accepting on", e)),
            }
        }
    }
}

impl Peer {
    /// Whether a message (or part of one) waits to be received, or the peer hung up.
    pub fn pending(&mut self) -> bool {
        if !self.reader.buffer().is_empty() {
            return true;
        }
        let mut b = [0u8; 1];
        // a peek that does not wait (the socket is blocking again right after)
        if self.stream.set_nonblocking(true).is_err() {
            return false;
        }
        let r = self.stream.peek(&mut b);
        let _ = self.stream.set_nonblocking(false);
        match r {
            // data, or the peer hung up (0)
            Ok(_) => true,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            ),
        }
    }

    /// Connects to `host:port`, trying for up to `timeout` (the server may still be starting).
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<Peer, OobError> {
        Peer::connect_saying(host, port, timeout, &mut |_| ())
    }

    /// As [`Peer::connect`]; `first_failure` hears the first attempt's error (nothing listens
    /// there, no route), once, before the retries, so that the user can be told at once.
    pub fn connect_saying(
        host: &str,
        port: u16,
        timeout: Duration,
        first_failure: &mut dyn FnMut(&std::io::Error),
    ) -> Result<Peer, OobError> {
        let addr = format!("{host}:{port}");
        let deadline = std::time::Instant::now() + timeout;
        let io = |what, source| OobError::Io {
            what,
            peer: addr.clone(),
            source,
        };
        let targets: Vec<_> = addr.to_socket_addrs().map_err(|e| io("resolving", e))?.collect();
        let mut told = false;
        loop {
            let mut last = None;
            for t in &targets {
                match TcpStream::connect_timeout(t, Duration::from_secs(2)) {
                    Ok(s) => return Peer::from_stream(s, addr.clone(), timeout, false),
                    Err(e) => last = Some(e),
                }
            }
            if let (false, Some(e)) = (told, &last) {
                first_failure(e);
                told = true;
            }
            if crate::signals::stops_waits() {
                return Err(OobError::Protocol {
                    peer: addr.clone(),
                    why: format!(
                        "interrupted while retrying the connection (the last attempt: {})",
                        last.map_or_else(|| "no address".to_string(), |e| e.to_string())
                    ),
                });
            }
            if std::time::Instant::now() >= deadline {
                return Err(io(
                    "connecting to",
                    last.unwrap_or_else(|| std::io::Error::other("no address")),
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits on `port` (every IPv4 address) for one client, for up to `timeout`.
    pub fn accept(port: u16, timeout: Duration) -> Result<Peer, OobError> {
        Listener::bind("0.0.0.0", port)?.accept(timeout)
    }

    fn from_stream(s: TcpStream, addr: String, timeout: Duration, leads: bool) -> Result<Peer, OobError> {
        let io = |source| OobError::Io {
            what: "configuring the socket to",
            peer: addr.clone(),
            source,
        };
        s.set_read_timeout(Some(timeout)).map_err(io)?;
        s.set_write_timeout(Some(timeout)).map_err(io)?;
        s.set_nodelay(true).map_err(io)?;
        let reader = BufReader::new(s.try_clone().map_err(io)?);
        Ok(Peer {
            stream: s,
            reader,
            addr,
            leads,
            timeout,
        })
    }

    /// The peer's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Changes the deadline of each later message (e.g. the length of a run before `Done`).
    pub fn set_timeout(&mut self, t: Duration) -> Result<(), OobError> {
        self.timeout = t;
        Ok(())
    }

    /// Sends one message.
    pub fn send<T: serde::Serialize>(&mut self, msg: &T) -> Result<(), OobError> {
        let mut line = serde_json::to_vec(msg).map_err(|e| OobError::Protocol {
            peer: self.addr.clone(),
            why: e.to_string(),
        })?;
        line.push(b'\n');
        self.stream.write_all(&line).map_err(|source| OobError::Io {
            what: "sending to",
            peer: self.addr.clone(),
            source,
        })
    }

    /// Receives one message: a line of at most [`MAX_MESSAGE`] bytes, complete within the
    /// deadline.
    pub fn recv<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, OobError> {
        let line = self.recv_line().map_err(|e| e.awaiting(awaited::<T>()))?;
        parse(&line, &self.addr)
    }

    /// Waits until the reader holds bytes, within `deadline` (`awaiting` names what for a
    /// timeout, `closed` the peer's hang-up), in slices of 200 ms so that a stop asked by a
    /// signal is seen: `Ok(false)` when a slice passed without bytes.
    pub(crate) fn fill(
        &mut self,
        deadline: Instant,
        awaiting: &str,
        closed: impl FnOnce() -> String,
    ) -> Result<bool, OobError> {
        let now = Instant::now();
        if now >= deadline {
            return Err(OobError::Timeout {
                peer: self.addr.clone(),
                secs: self.timeout.as_secs_f64().ceil() as u64,
                awaiting: awaiting.into(),
            });
        }
        stopped(&self.addr)?;
        // the deadline is the message's: each read may wait only for what is left of it
        self.stream
            .set_read_timeout(Some((deadline - now).min(Duration::from_millis(200))))
            .map_err(|source| OobError::Io {
                what: "configuring",
                peer: self.addr.clone(),
                source,
            })?;
        match self.reader.fill_buf() {
            Ok([]) => Err(OobError::Protocol {
                peer: self.addr.clone(),
                why: closed(),
            }),
            Ok(_) => Ok(true),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(source) => Err(OobError::Io {
                what: "receiving from",
                peer: self.addr.clone(),
                source,
            }),
        }
    }

    fn recv_line(&mut self) -> Result<String, OobError> {
        let deadline = Instant::now() + self.timeout;
        let mut buf = Vec::new();
        loop {
            if !self.fill(deadline, "message", || {
                "closed the connection (it stopped or failed)".into()
            })? {
                continue;
            }
            let chunk = self.reader.buffer();
            let (take, end) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            buf.extend_from_slice(&chunk[..take]);
            self.reader.consume(take + usize::from(end));
            if buf.len() > MAX_MESSAGE {
                return Err(OobError::Protocol {
                    peer: self.addr.clone(),
                    why: format!("sent a message longer than {MAX_MESSAGE} bytes: refused"),
                });
            }
            if end {
                return String::from_utf8(buf).map_err(|_| OobError::Protocol {
                    peer: self.addr.clone(),
                    why: "sent a message that is not UTF-8".into(),
                });
            }
        }
    }
}

/// The command-line flag a hello parameter comes from, for a mismatch's message.
fn flag_of(key: &str) -> Option<&'static str> {
    Some(match key {
        "sizes" => "-s, -a",
        "iters" => "-n; -D and --run-infinitely set 2000",
        "warmup" => "--warmup",
        "blocks" => "--blocks",
        "events" => "-e",
        "duration_s" => "-D",
        "run_infinitely" => "--run-infinitely",
        "path_mtu" => "-m",
        "rdma_cm" => "-R",
        "transport" => "-c",
        "tx_depth" => "-t",
        "rx_depth" => "-r",
        "postlist" => "-l",
        "cq_mod" => "-Q",
        "qps" => "-q",
        "threads" => "--threads",
        "bidirectional" => "-b",
        "backends" => "--backend",
        "db_mode" => "--db-mode",
        "inline_limit" => "-I",
        "buffer" => "from -s, -a",
        "workers" => "--workers",
        "clients" => "--clients",
        "window" => "--window",
        "kv_postlist" => "--postlist",
        "kv_batching" => "--batching",
        "update" => "--update",
        "value_size" => "--value-size",
        "keys" => "--keys",
        "requests" => "-n",
        "zipf" => "--zipf",
        _ => return None,
    })
}

/// Characters that change how text around them shows without being seen: bidirectional
/// overrides and isolates, zero-width characters, line and paragraph separators, the BOM.
pub fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
    )
}

/// Parses one message from `peer` (a line without its newline); anything else is a protocol
/// error quoting the line, escaped.
pub fn parse<T: serde::de::DeserializeOwned>(line: &str, peer: &str) -> Result<T, OobError> {
    serde_json::from_str(line).map_err(|e| OobError::Protocol {
        peer: peer.to_string(),
        why: format!("sent an unexpected message ({e}): {}", escape(line.trim())),
    })
}

/// A stop asked by a signal ([`crate::signals`]) ends a wait for the peer (unless held).
fn stopped(peer: &str) -> Result<(), OobError> {
    if crate::signals::stops_waits() {
        return Err(OobError::Protocol {
            peer: peer.to_string(),
            why: "the wait was interrupted".into(),
        });
    }
    Ok(())
}

impl OobError {
    /// A timeout names what was awaited.
    pub(crate) fn awaiting(self, what: &str) -> Self {
        match self {
            OobError::Timeout { peer, secs, .. } => OobError::Timeout {
                peer,
                secs,
                awaiting: what.into(),
            },
            e => e,
        }
    }
}

/// What a message of type `T` is, for a timeout's message.
pub(crate) fn awaited<T>() -> &'static str {
    let name = std::any::type_name::<T>();
    match name.rsplit("::").next().unwrap_or(name) {
        "Hello" => "parameters (hello)",
        "Answer" => "answer to our parameters",
        "QpInfo" => "QP address (QpInfo)",
        "Ready" => "word that its QPs are connected (Ready)",
        "Done" => "end of its run (Done)",
        _ => "message",
    }
}

/// The first message of each side: protocol, version and every parameter that both ends must
/// share, as a flat name -> value map (compared key by key).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Hello {
    /// Always [`PROTO`].
    pub proto: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// The parameters.
    pub params: std::collections::BTreeMap<String, String>,
}

impl Hello {
    /// A hello with these parameters.
    pub fn new(params: std::collections::BTreeMap<String, String>) -> Self {
        Hello {
            proto: PROTO.into(),
            version: VERSION,
            params,
        }
    }

    /// The first difference from `theirs`, as an error naming it.
    pub fn check(&self, theirs: &Hello) -> Result<(), OobError> {
        if theirs.proto != PROTO || theirs.version != VERSION {
            return Err(OobError::Mismatch {
                param: "protocol version".into(),
                ours: format!("{PROTO} {VERSION}"),
                theirs: escape(&format!("{} {}", theirs.proto, theirs.version)),
            });
        }
        let keys: std::collections::BTreeSet<&String> = self.params.keys().chain(theirs.params.keys()).collect();
        for k in keys {
            let (a, b) = (self.params.get(k), theirs.params.get(k));
            if a != b {
                return Err(OobError::Mismatch {
                    param: match flag_of(k) {
                        Some(f) => format!("{} ({f})", escape(k)),
                        None => escape(k),
                    },
                    ours: a.map(|v| escape(v)).unwrap_or_else(|| "(not set)".into()),
                    theirs: b.map(|v| escape(v)).unwrap_or_else(|| "(not set)".into()),
                });
            }
        }
        Ok(())
    }
}

/// The server's answer to a client's hello.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Answer {
    /// Parameters agree: here is the server's hello.
    Agree(Hello),
    /// They do not: the first difference, from the server's side.
    Refuse {
        /// The parameter.
        param: String,
        /// The server's value.
        server: String,
        /// The client's value.
        client: String,
    },
}

/// What a peer needs to connect to one QP and use its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QpInfo {
    /// QP number.
    pub qpn: u32,
    /// Initial PSN.
    pub psn: u32,
    /// LID.
    pub lid: u16,
    /// GID, 16 bytes.
    pub gid: [u8; 16],
    /// Buffer address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Buffer length.
    pub len: u64,
}

/// Sent by each side once all its QPs are connected (in RTS): after the peer's, its QPs take our
/// operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ready {
    /// QPs this side connected.
    pub qps: u32,
}

/// End of a run, with whether it went well.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Done {
    /// `None` when the side finished cleanly, else its error.
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn params(size: &str) -> BTreeMap<String, String> {
        [("op", "write"), ("size", size), ("iters", "1000")]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn hello_check_names_the_parameter_and_both_values() {
        let a = Hello::new(params("64"));
        assert!(a.check(&Hello::new(params("64"))).is_ok());
        let e = a.check(&Hello::new(params("128"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the two ends disagree on size: this side has 64, the peer has 128"
        );
        let mut old = Hello::new(params("64"));
        old.version = 0;
        assert!(a.check(&old).unwrap_err().to_string().contains("protocol version"));
        let mut missing = params("64");
        missing.remove("iters");
        let e = a.check(&Hello::new(missing)).unwrap_err().to_string();
        assert!(
            e.contains("iters (-n; -D and --run-infinitely set 2000): this side has 1000, the peer has (not set)"),
            "{e}"
        );
    }

    #[test]
    fn messages_cross_a_real_socket_and_a_closed_peer_is_reported() {
        let port = 20000 + (std::process::id() % 20000) as u16;
        let srv = std::thread::spawn(move || {
            let mut p = Peer::accept(port, Duration::from_secs(5)).unwrap();
            let h: Hello = p.recv().unwrap();
            p.send(&Answer::Agree(h)).unwrap();
            // then close without Done
        });
        let mut c = Peer::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        let h = Hello::new(params("64"));
        c.send(&h).unwrap();
        assert_eq!(c.recv::<Answer>().unwrap(), Answer::Agree(h));
        srv.join().unwrap();
        let e = c.recv::<Done>().unwrap_err();
        assert!(e.to_string().contains("closed the connection"), "{e}");
    }

    /// `pending` tells whether the peer sent something or hung up, without waiting and without
    /// taking the message (what a wait for the connection manager checks); `peer_addr` is the
    /// socket's, not the name it was given.
    #[test]
    fn pending_sees_a_message_or_a_hang_up_without_taking_it() {
        let port = 20000 + ((std::process::id() + 13) % 20000) as u16;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let srv = std::thread::spawn(move || {
            let mut p = Peer::accept(port, Duration::from_secs(5)).unwrap();
            rx.recv().unwrap();
            p.send(&Done {
                error: Some("boom".into()),
            })
            .unwrap();
            rx.recv().unwrap();
            // then hangs up
        });
        let mut c = Peer::connect("localhost", port, Duration::from_secs(5)).unwrap();
        assert!(!c.pending(), "nothing sent yet");
        let r: &dyn Rendezvous = &c;
        assert_eq!(r.peer_addr().map(|a| a.port()), Some(port));
        tx.send(()).unwrap();
        let t = std::time::Instant::now();
        while !c.pending() {
            assert!(t.elapsed() < Duration::from_secs(5), "the message never showed");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(c.pending(), "peeking does not take it");
        assert_eq!(c.recv::<Done>().unwrap().error.as_deref(), Some("boom"));
        assert!(!c.pending(), "taken");
        tx.send(()).unwrap();
        srv.join().unwrap();
        let t = std::time::Instant::now();
        while !c.pending() {
            assert!(t.elapsed() < Duration::from_secs(5), "the hang-up never showed");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A message of another kind is not taken for a `Done` (fields it does not have).
    #[test]
    fn done_refuses_another_message() {
        assert!(serde_json::from_str::<Done>(r#"{"stop":true}"#).is_err());
        assert_eq!(serde_json::from_str::<Done>(r#"{}"#).unwrap().error, None);
    }

    /// The barrier waits for the peer's `Ready` (a side that returns from it early would post to
    /// a QP that is not connected yet) and refuses a peer that connected another number of QPs.
    #[test]
    fn ready_waits_for_the_peer_and_checks_the_qp_count() {
        let port = 20000 + ((std::process::id() + 7) % 20000) as u16;
        let srv = std::thread::spawn(move || {
            let mut p = Peer::accept(port, Duration::from_secs(5)).unwrap();
            // the server is slow to connect its QPs
            std::thread::sleep(Duration::from_millis(300));
            (&mut p as &mut dyn Rendezvous).barrier(2).unwrap();
            let e = (&mut p as &mut dyn Rendezvous).barrier(3).unwrap_err().to_string();
            assert!(e.contains("connected QPs: this side has 3, the peer has 4"), "{e}");
        });
        let mut c = Peer::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        let t = std::time::Instant::now();
        (&mut c as &mut dyn Rendezvous).barrier(2).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(250),
            "returned before the peer was ready"
        );
        let e = (&mut c as &mut dyn Rendezvous).barrier(4).unwrap_err().to_string();
        assert!(e.contains("connected QPs: this side has 4, the peer has 3"), "{e}");
        srv.join().unwrap();
    }

    /// A line without a newline is refused at [`MAX_MESSAGE`] bytes (before: buffered without
    /// limit, 1 GiB sent made the process 1.05 GB resident).
    #[test]
    fn an_endless_line_is_refused_at_the_limit() {
        let l = Listener::bind("127.0.0.1", 0).unwrap();
        let port: u16 = l.local_addr().rsplit(':').next().unwrap().parse().unwrap();
        let t = std::thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let chunk = vec![b'x'; 8192];
            for _ in 0..64 {
                if s.write_all(&chunk).is_err() {
                    break; // the other side gave up: as it should
                }
            }
        });
        let mut p = l.accept(Duration::from_secs(5)).unwrap();
        let e = p.recv::<Hello>().unwrap_err().to_string();
        assert!(e.contains("longer than 65536 bytes"), "{e}");
        t.join().unwrap();
    }

    /// The deadline is the message's, not each read's: a peer that sends a byte every 100 ms
    /// without ever finishing a line is cut off at the deadline (before: each byte restarted the
    /// read timeout, so it kept the exchange alive for ever). The message says what was awaited
    /// from whom (before: "Resource temporarily unavailable (os error 11)").
    #[test]
    fn a_trickling_or_silent_peer_times_out_per_message() {
        let l = Listener::bind("127.0.0.1", 0).unwrap();
        let port: u16 = l.local_addr().rsplit(':').next().unwrap().parse().unwrap();
        let t = std::thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            for _ in 0..40 {
                if s.write_all(b" ").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let mut p = l.accept(Duration::from_secs(5)).unwrap();
        p.set_timeout(Duration::from_secs(1)).unwrap();
        let t0 = Instant::now();
        let e = p.recv::<Hello>().unwrap_err().to_string();
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(3),
            "{took:?}"
        );
        assert!(
            e.starts_with("no parameters (hello) from 127.0.0.1:") && e.ends_with("within 1 s"),
            "{e}"
        );
        t.join().unwrap();
        // silent: the same message, no errno text
        let l = Listener::bind("127.0.0.1", 0).unwrap();
        let port: u16 = l.local_addr().rsplit(':').next().unwrap().parse().unwrap();
        let _c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut p = l.accept(Duration::from_secs(5)).unwrap();
        p.set_timeout(Duration::from_millis(300)).unwrap();
        let e = p.recv::<Done>().unwrap_err().to_string();
        assert!(
            e.contains("no end of its run (Done) from") && !e.contains("os error"),
            "{e}"
        );
    }

    /// Text from the peer never reaches the terminal raw: an escape sequence in a refused
    /// parameter or value comes out escaped.
    #[test]
    fn peer_text_is_escaped() {
        let mut ours = params("64");
        ours.insert("op".into(), "write".into());
        let mut theirs = params("64");
        theirs.insert("op".into(), "\u{1b}[2J\u{1b}[31mwrite\n".into());
        let e = Hello::new(ours).check(&Hello::new(theirs)).unwrap_err().to_string();
        assert!(!e.chars().any(|c| c.is_control()), "{e:?}");
        assert!(e.contains("\\u{1b}[2J"), "{e}");
        assert_eq!(escape(&"y".repeat(500)).len(), 203);
        // a right-to-left override or a line separator does not reach the terminal either
        assert!(!escape("boom\u{202e}kool\u{2028}x").contains(['\u{202e}', '\u{2028}']));
    }

    /// A server can listen on one address and on a port the system picks, and says which.
    #[test]
    fn a_listener_names_its_real_port() {
        let l = Listener::bind("127.0.0.1", 0).unwrap();
        let port: u16 = l.local_addr().rsplit(':').next().unwrap().parse().unwrap();
        assert!(port > 0 && l.local_addr().starts_with("127.0.0.1:"));
        assert!(Listener::bind("not-an-ip", 0).is_err());
    }

    #[test]
    fn unreachable_server_fails_within_the_deadline() {
        let t = std::time::Instant::now();
        // port 1 on loopback: nothing listens there
        let e = Peer::connect("127.0.0.1", 1, Duration::from_millis(600)).err().unwrap();
        assert!(e.to_string().starts_with("connecting to 127.0.0.1:1"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
