//! The packed batch format of the ABI benchmark (little endian). Shared verbatim by the
//! guest and by the host benchmark (`transform/benches/word_parse.rs`).
//!
//! batch   = u32 count, record*
//! record  = str topic, i32 partition, i64 offset, opt_i64 timestamp, opt_bytes key,
//!           opt_bytes value, u32 header_count, (str name, opt_bytes value)*
//! answer  = u32 count, outcome*
//! outcome = u8 0, u32 n, record*  |  u8 1, str message
//! str     = u32 len, bytes;  opt_bytes = u32 len (u32::MAX = none), bytes
//! opt_i64 = u8 0 | u8 1, i64

/// A record in the packed world.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// One outcome in the packed world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum POutcome {
    Records(Vec<PRecord>),
    Error(String),
}

fn put_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
        Some(b) => {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
    }
}

pub fn put_record(out: &mut Vec<u8>, r: &PRecord) {
    put_bytes(out, Some(r.topic.as_bytes()));
    out.extend_from_slice(&r.partition.to_le_bytes());
    out.extend_from_slice(&r.offset.to_le_bytes());
    match r.timestamp {
        None => out.push(0),
        Some(t) => {
            out.push(1);
            out.extend_from_slice(&t.to_le_bytes());
        }
    }
    put_bytes(out, r.key.as_deref());
    put_bytes(out, r.value.as_deref());
    out.extend_from_slice(&(r.headers.len() as u32).to_le_bytes());
    for (n, v) in &r.headers {
        put_bytes(out, Some(n.as_bytes()));
        put_bytes(out, v.as_deref());
    }
}

pub fn encode_batch(records: &[PRecord]) -> Vec<u8> {
    let mut out = Vec::with_capacity(records.len() * 64);
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    for r in records {
        put_record(&mut out, r);
    }
    out
}

pub fn encode_outcomes(outcomes: &[POutcome]) -> Vec<u8> {
    let mut out = Vec::with_capacity(outcomes.len() * 96);
    out.extend_from_slice(&(outcomes.len() as u32).to_le_bytes());
    for o in outcomes {
        match o {
            POutcome::Records(rs) => {
                out.push(0);
                out.extend_from_slice(&(rs.len() as u32).to_le_bytes());
                for r in rs {
                    put_record(&mut out, r);
                }
            }
            POutcome::Error(m) => {
                out.push(1);
                put_bytes(&mut out, Some(m.as_bytes()));
            }
        }
    }
    out
}

/// A cursor over a packed buffer; every read is bounds-checked.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.buf.len() < n {
            return Err(format!(
                "truncated buffer: need {n} bytes, have {}",
                self.buf.len()
            ));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| "u32")?,
        ))
    }

    fn i32(&mut self) -> Result<i32, String> {
        Ok(i32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| "i32")?,
        ))
    }

    fn i64(&mut self) -> Result<i64, String> {
        Ok(i64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| "i64")?,
        ))
    }

    fn opt_bytes(&mut self) -> Result<Option<Vec<u8>>, String> {
        let n = self.u32()?;
        if n == u32::MAX {
            return Ok(None);
        }
        Ok(Some(self.take(n as usize)?.to_vec()))
    }

    fn string(&mut self) -> Result<String, String> {
        let b = self.opt_bytes()?.ok_or("null string")?;
        String::from_utf8(b).map_err(|e| e.to_string())
    }

    pub fn record(&mut self) -> Result<PRecord, String> {
        let topic = self.string()?;
        let partition = self.i32()?;
        let offset = self.i64()?;
        let timestamp = match self.u8()? {
            0 => None,
            _ => Some(self.i64()?),
        };
        let key = self.opt_bytes()?;
        let value = self.opt_bytes()?;
        let n = self.u32()? as usize;
        let mut headers = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            headers.push((self.string()?, self.opt_bytes()?));
        }
        Ok(PRecord {
            topic,
            partition,
            offset,
            timestamp,
            key,
            value,
            headers,
        })
    }

    pub fn outcome(&mut self) -> Result<POutcome, String> {
        match self.u8()? {
            0 => {
                let n = self.u32()? as usize;
                let mut rs = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    rs.push(self.record()?);
                }
                Ok(POutcome::Records(rs))
            }
            _ => Ok(POutcome::Error(self.string()?)),
        }
    }
}

pub fn decode_batch(buf: &[u8]) -> Result<Vec<PRecord>, String> {
    let mut r = Reader::new(buf);
    let n = r.u32()? as usize;
    (0..n).map(|_| r.record()).collect()
}

pub fn decode_outcomes(buf: &[u8]) -> Result<Vec<POutcome>, String> {
    let mut r = Reader::new(buf);
    let n = r.u32()? as usize;
    (0..n).map(|_| r.outcome()).collect()
}
