//! The out-of-band exchange between a client and a server over TCP: one JSON document per line,
//! versioned. The client sends its `Hello` (every scenario parameter); the server compares it with
//! its own and answers with its `Hello` or a refusal naming the first parameter that differs and
//! both values (and both stop); then each side sends the endpoints of its QPs, connects them and
//! sends `Ready` (a barrier: neither side posts before the other's QPs can take its operations,
//! as perftest's handshake after connecting); at the end each sends `Done`. Every read has a
//! deadline.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

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
}

impl Peer {
    /// Connects to `host:port`, trying for up to `timeout` (the server may still be starting).
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<Peer, OobError> {
        let addr = format!("{host}:{port}");
        let deadline = std::time::Instant::now() + timeout;
        let io = |what, source| OobError::Io {
            what,
            peer: addr.clone(),
            source,
        };
        let targets: Vec<_> = addr.to_socket_addrs().map_err(|e| io("resolving", e))?.collect();
        loop {
            let mut last = None;
            for t in &targets {
                match TcpStream::connect_timeout(t, Duration::from_secs(2)) {
                    Ok(s) => return Peer::from_stream(s, addr.clone(), timeout, false),
                    Err(e) => last = Some(e),
                }
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

    /// Waits on `port` for one client, for up to `timeout`.
    pub fn accept(port: u16, timeout: Duration) -> Result<Peer, OobError> {
        let here = format!("0.0.0.0:{port}");
        let io = |what, source| OobError::Io {
            what,
            peer: here.clone(),
            source,
        };
        let l = TcpListener::bind(("0.0.0.0", port)).map_err(|e| io("listening on", e))?;
        l.set_nonblocking(true).map_err(|e| io("listening on", e))?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match l.accept() {
                Ok((s, a)) => {
                    s.set_nonblocking(false).map_err(|e| io("accepting on", e))?;
                    return Peer::from_stream(s, a.to_string(), timeout, true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if std::time::Instant::now() >= deadline {
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
        })
    }

    /// The peer's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Changes the deadline of later reads (e.g. the length of a run before `Done`).
    pub fn set_timeout(&self, t: Duration) -> Result<(), OobError> {
        self.stream.set_read_timeout(Some(t)).map_err(|source| OobError::Io {
            what: "configuring",
            peer: self.addr.clone(),
            source,
        })
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

    /// Receives one message.
    pub fn recv<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, OobError> {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).map_err(|source| OobError::Io {
            what: "receiving from",
            peer: self.addr.clone(),
            source,
        })?;
        if n == 0 {
            return Err(OobError::Protocol {
                peer: self.addr.clone(),
                why: "closed the connection (it stopped or failed)".into(),
            });
        }
        serde_json::from_str(&line).map_err(|e| OobError::Protocol {
            peer: self.addr.clone(),
            why: format!(
                "sent an unexpected message ({e}): {}",
                line.trim().chars().take(200).collect::<String>()
            ),
        })
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
                theirs: format!("{} {}", theirs.proto, theirs.version),
            });
        }
        let keys: std::collections::BTreeSet<&String> = self.params.keys().chain(theirs.params.keys()).collect();
        for k in keys {
            let (a, b) = (self.params.get(k), theirs.params.get(k));
            if a != b {
                return Err(OobError::Mismatch {
                    param: k.clone(),
                    ours: a.cloned().unwrap_or_else(|| "(not set)".into()),
                    theirs: b.cloned().unwrap_or_else(|| "(not set)".into()),
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

impl Peer {
    /// The barrier after connecting `qps` QPs: sends our [`Ready`] and waits for the peer's; the
    /// two must have connected as many.
    pub fn ready(&mut self, qps: u32) -> Result<(), OobError> {
        self.send(&Ready { qps })?;
        let theirs: Ready = self.recv()?;
        if theirs.qps != qps {
            return Err(OobError::Mismatch {
                param: "connected QPs".into(),
                ours: qps.to_string(),
                theirs: theirs.qps.to_string(),
            });
        }
        Ok(())
    }
}

/// End of a run, with whether it went well.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Done {
    /// `None` when the side finished cleanly, else its error.
    pub error: Option<String>,
}

/// The out-of-band exchange a client/server run needs, whatever carries it: messages (JSON
/// values) to and from the one peer, in order. [`Peer`] carries them over TCP; another launcher
/// (MPI, a batch system's key-value store) can implement it and pass it to
/// [`crate::probe::run_with_peer`]. The typed steps of the protocol (the parameter handshake,
/// the barrier, the end) are built on it, on `dyn Rendezvous`.
pub trait Rendezvous {
    /// Sends one message.
    fn send_value(&mut self, msg: serde_json::Value) -> Result<(), OobError>;
    /// Receives the peer's next message.
    fn recv_value(&mut self) -> Result<serde_json::Value, OobError>;
    /// Whether this side leads: it answers the other's parameters (the server).
    fn leads(&self) -> bool;
    /// The peer, as messages name it.
    fn peer_name(&self) -> String;
    /// The deadline of later receives.
    fn set_timeout(&mut self, t: Duration) -> Result<(), OobError>;
}

impl Rendezvous for Peer {
    fn send_value(&mut self, msg: serde_json::Value) -> Result<(), OobError> {
        self.send(&msg)
    }
    fn recv_value(&mut self) -> Result<serde_json::Value, OobError> {
        self.recv()
    }
    fn leads(&self) -> bool {
        self.leads
    }
    fn peer_name(&self) -> String {
        self.addr.clone()
    }
    fn set_timeout(&mut self, t: Duration) -> Result<(), OobError> {
        Peer::set_timeout(self, t)
    }
}

impl dyn Rendezvous + '_ {
    /// Sends one typed message.
    pub fn put<T: serde::Serialize>(&mut self, msg: &T) -> Result<(), OobError> {
        let v = serde_json::to_value(msg).map_err(|e| OobError::Protocol {
            peer: self.peer_name(),
            why: e.to_string(),
        })?;
        self.send_value(v)
    }

    /// Receives one typed message.
    pub fn take<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, OobError> {
        let v = self.recv_value()?;
        let text = v.to_string();
        serde_json::from_value(v).map_err(|e| OobError::Protocol {
            peer: self.peer_name(),
            why: format!(
                "sent an unexpected message ({e}): {}",
                text.chars().take(200).collect::<String>()
            ),
        })
    }

    /// Sends ours, receives theirs.
    pub fn exchange<T: serde::Serialize + serde::de::DeserializeOwned>(&mut self, mine: &T) -> Result<T, OobError> {
        self.put(mine)?;
        self.take()
    }

    /// The parameter handshake: the two ends compare their hellos; the first difference stops
    /// both, named from each side (the leader answers the follower's hello).
    pub fn agree(&mut self, hello: &Hello) -> Result<(), OobError> {
        if !self.leads() {
            self.put(hello)?;
            return match self.take::<Answer>()? {
                Answer::Agree(theirs) => hello.check(&theirs),
                Answer::Refuse { param, server, client } => Err(OobError::Mismatch {
                    param,
                    ours: client,
                    theirs: server,
                }),
            };
        }
        let theirs: Hello = self.take()?;
        if let Err(e) = hello.check(&theirs) {
            if let OobError::Mismatch { param, ours, theirs } = &e {
                self.put(&Answer::Refuse {
                    param: param.clone(),
                    server: ours.clone(),
                    client: theirs.clone(),
                })?;
            }
            return Err(e);
        }
        self.put(&Answer::Agree(hello.clone()))
    }

    /// The barrier after connecting `qps` QPs: sends our [`Ready`] and waits for the peer's; the
    /// two must have connected as many.
    pub fn barrier(&mut self, qps: u32) -> Result<(), OobError> {
        let theirs: Ready = self.exchange(&Ready { qps })?;
        if theirs.qps != qps {
            return Err(OobError::Mismatch {
                param: "connected QPs".into(),
                ours: qps.to_string(),
                theirs: theirs.qps.to_string(),
            });
        }
        Ok(())
    }
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
        assert!(e.contains("iters: this side has 1000, the peer has (not set)"), "{e}");
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

    /// The barrier waits for the peer's `Ready` (a side that returns from it early would post to
    /// a QP that is not connected yet) and refuses a peer that connected another number of QPs.
    #[test]
    fn ready_waits_for_the_peer_and_checks_the_qp_count() {
        let port = 20000 + ((std::process::id() + 7) % 20000) as u16;
        let srv = std::thread::spawn(move || {
            let mut p = Peer::accept(port, Duration::from_secs(5)).unwrap();
            // the server is slow to connect its QPs
            std::thread::sleep(Duration::from_millis(300));
            p.ready(2).unwrap();
            let e = p.ready(3).unwrap_err().to_string();
            assert!(e.contains("connected QPs: this side has 3, the peer has 4"), "{e}");
        });
        let mut c = Peer::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        let t = std::time::Instant::now();
        c.ready(2).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(250),
            "returned before the peer was ready"
        );
        let e = c.ready(4).unwrap_err().to_string();
        assert!(e.contains("connected QPs: this side has 4, the peer has 3"), "{e}");
        srv.join().unwrap();
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
