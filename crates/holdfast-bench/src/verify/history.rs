//! A history: every operation a client sent and what came back, as JSON lines.
//!
//! Each attempt is one `invoke` event and, later, one `complete` event with
//! the same `op` number; a fault is one `fault` event. Times are microseconds
//! of the Unix epoch taken from a monotonic clock anchored once at start, so
//! they order events exactly and compare with the `expires_at` the database
//! returns (same machine, same clock).

use std::io::{BufRead, Write};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// One cart line as sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub item: String,
    pub qty: u32,
    /// Candidate locations in order; `None`: every location of the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locations: Option<Vec<String>>,
}

/// Units of one item held at one location.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Alloc {
    pub item: String,
    pub location: String,
    pub qty: u32,
}

/// What a client asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Call {
    Reserve {
        key: String,
        lines: Vec<Line>,
        ttl: u32,
        partial: bool,
        split: bool,
    },
    Claim {
        id: i64,
    },
    Release {
        id: i64,
    },
    Extend {
        id: i64,
        ttl: u32,
    },
    /// `change` is `set`, `adjust` or `fulfil`.
    Stock {
        item: String,
        location: String,
        change: String,
        n: i64,
    },
    Levels {
        item: String,
    },
    /// Never recorded: the checker's own step for a hold reaching its
    /// `expires_at` (`at`, microseconds).
    Lapse {
        id: i64,
        at: i64,
    },
    /// Never recorded: the checker's own step for the level stock change
    /// `of` answered with, which is read after the change commits.
    Read {
        of: u64,
        item: String,
        location: String,
    },
}

/// Quantities of one (item, location) as answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Qty {
    pub on_hand: i64,
    pub available: i64,
    pub reserved: i64,
    pub committed: i64,
}

/// A reservation as answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub id: i64,
    pub status: String,
    /// Microseconds of the Unix epoch.
    pub expires_at: i64,
    pub lines: Vec<Alloc>,
    /// A reserve that created it (`false`: a replay); absent for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
}

/// What one line of a refused reserve could have had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Short {
    pub item: String,
    pub requested: u32,
    pub available: u32,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Answer {
    Reservation(Held),
    Level {
        location: String,
        qty: Qty,
    },
    Levels {
        locations: Vec<(String, Qty)>,
    },
    /// A refusal with its stable error code (`insufficient_stock` carries
    /// what each line could have had).
    Refused {
        code: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        lines: Vec<Short>,
    },
    /// No answer that says what happened: a timeout, a lost connection, a
    /// `503`. The operation may or may not have taken effect.
    Unknown {
        reason: String,
    },
    /// Never recorded: a stock change that was accepted, its level answer
    /// being checked by its own [`Call::Read`].
    Applied,
}

impl Answer {
    pub fn is_unknown(&self) -> bool {
        matches!(self, Answer::Unknown { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    Invoke { at: i64, op: u64, client: u32, call: Call },
    Complete { at: i64, op: u64, answer: Answer },
    Fault { at: i64, fault: String },
}

/// A monotonic clock read as microseconds of the Unix epoch.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    epoch_us: i64,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        let epoch_us = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0);
        Self { start: Instant::now(), epoch_us }
    }

    pub fn now(&self) -> i64 {
        self.epoch_us + self.start.elapsed().as_micros() as i64
    }
}

/// Collects events from many clients; written out once at the end.
#[derive(Debug, Default)]
pub struct Recorder {
    clock: Clock,
    inner: Mutex<(u64, Vec<Event>)>,
}

impl Recorder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the invocation; returns the operation's number.
    pub fn invoke(&self, client: u32, call: Call) -> u64 {
        let mut g = self.inner.lock().expect("recorder lock");
        g.0 += 1;
        let op = g.0;
        // The time is read under the lock, so the file is in time order.
        let at = self.clock.now();
        g.1.push(Event::Invoke { at, op, client, call });
        op
    }

    pub fn complete(&self, op: u64, answer: Answer) {
        let mut g = self.inner.lock().expect("recorder lock");
        let at = self.clock.now();
        g.1.push(Event::Complete { at, op, answer });
    }

    pub fn fault(&self, fault: impl Into<String>) {
        let mut g = self.inner.lock().expect("recorder lock");
        let at = self.clock.now();
        g.1.push(Event::Fault { at, fault: fault.into() });
    }

    pub fn events(&self) -> Vec<Event> {
        self.inner.lock().expect("recorder lock").1.clone()
    }
}

pub fn write(events: &[Event], out: &mut impl Write) -> std::io::Result<()> {
    for e in events {
        serde_json::to_writer(&mut *out, e)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

pub fn read(input: impl BufRead) -> std::io::Result<Vec<Event>> {
    let mut events = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let e = serde_json::from_str(&line).map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("history line {}: {e}", n + 1))
        })?;
        events.push(e);
    }
    Ok(events)
}
