//! The exchange behind a trait: what a client/server run needs of its peer, and the protocol's
//! typed steps (handshake, QP exchange, barrier) built on it.

use super::{awaited, escape, Answer, Hello, OobError, Peer, Ready};
use std::time::Duration;

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
    /// Whether the peer sent something not yet received, or hung up: a wait elsewhere (the
    /// connection manager's) can end early and hear why. Without a way to tell: false.
    fn pending(&mut self) -> bool {
        false
    }
    /// The peer's IP address and port, when the carrier has one (TCP).
    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        None
    }
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
    fn pending(&mut self) -> bool {
        Peer::pending(self)
    }
    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.stream.peer_addr().ok()
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
        let v = self.recv_value().map_err(|e| e.awaiting(awaited::<T>()))?;
        let text = v.to_string();
        serde_json::from_value(v).map_err(|e| OobError::Protocol {
            peer: self.peer_name(),
            why: format!("sent an unexpected message ({e}): {}", escape(&text)),
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
                    param: escape(&param),
                    ours: escape(&client),
                    theirs: escape(&server),
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

/// A peer whose messages are given in advance (`.0`, received in order; nothing left: an
/// error), and what this side sent to it (`.1`): for tests of the exchanges built on
/// [`Rendezvous`].
#[cfg(test)]
pub(crate) struct Canned(
    pub std::collections::VecDeque<serde_json::Value>,
    pub Vec<serde_json::Value>,
);

#[cfg(test)]
impl Rendezvous for Canned {
    fn send_value(&mut self, msg: serde_json::Value) -> Result<(), OobError> {
        self.1.push(msg);
        Ok(())
    }
    fn recv_value(&mut self) -> Result<serde_json::Value, OobError> {
        self.0.pop_front().ok_or(OobError::Protocol {
            peer: "canned".into(),
            why: "nothing more".into(),
        })
    }
    fn leads(&self) -> bool {
        false
    }
    fn peer_name(&self) -> String {
        "canned".into()
    }
    fn set_timeout(&mut self, _t: Duration) -> Result<(), OobError> {
        Ok(())
    }
}
