//! Deterministic CBOR (RFC 8949 §4.2.1, core deterministic encoding), strict decoding.
//!
//! Every repoch structure is a *positional array*: no maps at all, so there is no key order
//! to get wrong and no duplicate key to accept. Integers, byte strings, text strings,
//! booleans, null and arrays are the only types. ciborium writes integers and lengths in
//! their shortest form and arrays with definite lengths, so encoding a [`Value`] tree built
//! this way is canonical by construction.
//!
//! ciborium's decoder is lenient (non-minimal integers, indefinite lengths, tags, trailing
//! bytes). [`decode_strict`] therefore rejects: input over the size bound, trailing bytes,
//! maps, tags, floats, and finally anything whose re-encoding is not byte-identical to the
//! input — which catches every non-minimal or indefinite-length form.

use ciborium::value::{Integer, Value};

use crate::limits::FRAME_BYTES_MAX;

/// Why bytes were refused as a repoch structure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("input is {len} bytes, over the bound of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("a frame of 0 bytes (every frame holds one value)")]
    EmptyFrame,
    #[error("not well-formed CBOR: {0}")]
    Malformed(String),
    #[error("{0} trailing bytes after the value")]
    Trailing(usize),
    #[error("forbidden CBOR item: {0}")]
    Forbidden(&'static str),
    #[error("not in canonical (core deterministic) encoding")]
    NonCanonical,
    #[error("{what}: {why}")]
    Schema { what: &'static str, why: String },
}

impl DecodeError {
    pub fn schema(what: &'static str, why: impl Into<String>) -> Self {
        DecodeError::Schema {
            what,
            why: why.into(),
        }
    }
}

/// A type with one canonical CBOR form.
pub trait Canonical: Sized {
    /// Builds the value tree. Must only use arrays, integers, bytes, text, bool and null.
    fn to_value(&self) -> Value;
    /// Reads the value tree; the inverse of `to_value` for every value it accepts.
    fn from_value(v: Value) -> Result<Self, DecodeError>;

    /// The canonical bytes.
    fn to_bytes(&self) -> Vec<u8> {
        encode(&self.to_value())
    }

    /// Strictly decodes canonical bytes (see module docs).
    fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::from_value(decode_strict(bytes, FRAME_BYTES_MAX)?)
    }
}

/// Encodes a value tree. Infallible for trees made of the allowed types.
pub fn encode(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::ser::into_writer(v, &mut out).expect("writing CBOR into a Vec cannot fail");
    out
}

/// Decodes one value, refusing anything that is not canonical repoch CBOR.
pub fn decode_strict(bytes: &[u8], max: usize) -> Result<Value, DecodeError> {
    if bytes.len() > max {
        return Err(DecodeError::TooLarge {
            len: bytes.len(),
            max,
        });
    }
    let mut rest = bytes;
    let v: Value =
        ciborium::de::from_reader(&mut rest).map_err(|e| DecodeError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError::Trailing(rest.len()));
    }
    check_allowed(&v)?;
    if encode(&v) != bytes {
        return Err(DecodeError::NonCanonical);
    }
    Ok(v)
}

fn check_allowed(v: &Value) -> Result<(), DecodeError> {
    match v {
        // Encoding rule 3: unsigned integers only.
        Value::Integer(i) if i128::from(*i) < 0 => Err(DecodeError::Forbidden("negative integer")),
        Value::Integer(_) | Value::Bytes(_) | Value::Text(_) | Value::Bool(_) | Value::Null => {
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(check_allowed),
        Value::Map(_) => Err(DecodeError::Forbidden("map")),
        Value::Tag(..) => Err(DecodeError::Forbidden("tag")),
        Value::Float(_) => Err(DecodeError::Forbidden("float")),
        _ => Err(DecodeError::Forbidden("unknown item")),
    }
}

/// Reads the fields of a positional array, in order, then checks none is left over.
#[derive(Debug)]
pub struct Fields {
    what: &'static str,
    items: std::vec::IntoIter<Value>,
}

impl Fields {
    /// Opens an array of exactly `arity` items.
    pub fn open(v: Value, what: &'static str, arity: usize) -> Result<Self, DecodeError> {
        match v {
            Value::Array(items) if items.len() == arity => Ok(Fields {
                what,
                items: items.into_iter(),
            }),
            Value::Array(items) => Err(DecodeError::schema(
                what,
                format!("expected {arity} fields, found {}", items.len()),
            )),
            _ => Err(DecodeError::schema(what, "expected an array")),
        }
    }

    /// Opens an array of `min` to `max` items: a record whose last fields are optional
    /// (present only when set: one encoding per value). [`Fields::more`] tells whether one
    /// is left.
    pub fn open_between(
        v: Value,
        what: &'static str,
        min: usize,
        max: usize,
    ) -> Result<Self, DecodeError> {
        match v {
            Value::Array(items) if (min..=max).contains(&items.len()) => Ok(Fields {
                what,
                items: items.into_iter(),
            }),
            Value::Array(items) => Err(DecodeError::schema(
                what,
                format!("expected {min} to {max} fields, found {}", items.len()),
            )),
            _ => Err(DecodeError::schema(what, "expected an array")),
        }
    }

    /// Whether a field is left to read.
    pub fn more(&self) -> bool {
        self.items.len() > 0
    }

    pub fn field(&mut self) -> Result<Value, DecodeError> {
        self.items
            .next()
            .ok_or_else(|| DecodeError::schema(self.what, "missing field"))
    }

    pub fn uint(&mut self) -> Result<u64, DecodeError> {
        as_uint(self.field()?, self.what)
    }

    pub fn bytes<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        as_bytes::<N>(self.field()?, self.what)
    }

    pub fn bstr(&mut self, max: usize) -> Result<Vec<u8>, DecodeError> {
        match self.field()? {
            Value::Bytes(b) if b.len() <= max => Ok(b),
            Value::Bytes(b) => Err(DecodeError::schema(
                self.what,
                format!("{} bytes > {max}", b.len()),
            )),
            _ => Err(DecodeError::schema(self.what, "expected a byte string")),
        }
    }

    pub fn text(&mut self, max: usize) -> Result<String, DecodeError> {
        as_text(self.field()?, self.what, max)
    }

    /// A text a key signs as its own, which holds no forging character of the text rule
    /// (docs/PROTOCOL.md, "Text"): producers escape outside text before they sign it.
    pub fn plain_text(&mut self, max: usize) -> Result<String, DecodeError> {
        let s = self.text(max)?;
        crate::text::check(&s).map_err(|why| DecodeError::schema(self.what, why))?;
        Ok(s)
    }

    /// A `path` of the schema: absolute and canonical, at most `PATH_BYTES_MAX` bytes, no
    /// forging character ([`as_path`]).
    pub fn path(&mut self) -> Result<String, DecodeError> {
        as_path(self.field()?, self.what)
    }

    /// `null` or a value.
    pub fn opt<T>(
        &mut self,
        f: impl FnOnce(Value) -> Result<T, DecodeError>,
    ) -> Result<Option<T>, DecodeError> {
        match self.field()? {
            Value::Null => Ok(None),
            v => f(v).map(Some),
        }
    }

    /// An array of at most `max` items, each read by `f`.
    pub fn list<T>(
        &mut self,
        max: usize,
        f: impl FnMut(Value) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        as_list(self.field()?, self.what, max, f)
    }

    /// Checks the discriminant text that opens tagged arrays.
    pub fn expect_text(&mut self, want: &str) -> Result<(), DecodeError> {
        let got = self.text(64)?;
        if got != want {
            return Err(DecodeError::schema(
                self.what,
                format!("expected {want:?}, found {got:?}"),
            ));
        }
        Ok(())
    }
}

pub fn as_uint(v: Value, what: &'static str) -> Result<u64, DecodeError> {
    match v {
        Value::Integer(i) => {
            u64::try_from(i).map_err(|_| DecodeError::schema(what, "expected an unsigned integer"))
        }
        _ => Err(DecodeError::schema(what, "expected an unsigned integer")),
    }
}

pub fn as_bytes<const N: usize>(v: Value, what: &'static str) -> Result<[u8; N], DecodeError> {
    match v {
        Value::Bytes(b) => <[u8; N]>::try_from(b.as_slice()).map_err(|_| {
            DecodeError::schema(what, format!("expected {N} bytes, found {}", b.len()))
        }),
        _ => Err(DecodeError::schema(what, "expected a byte string")),
    }
}

pub fn as_text(v: Value, what: &'static str, max: usize) -> Result<String, DecodeError> {
    match v {
        Value::Text(t) if t.len() <= max => Ok(t),
        Value::Text(t) => Err(DecodeError::schema(
            what,
            format!("text of {} bytes > {max}", t.len()),
        )),
        _ => Err(DecodeError::schema(what, "expected a text string")),
    }
}

/// A `path` of the schema (docs/PROTOCOL.md, "Schema"): a text of at most
/// `PATH_BYTES_MAX` bytes, absolute and canonical (no empty, "." or ".." component, no
/// trailing "/"; "/" itself is one), holding no forging character.
pub fn as_path(v: Value, what: &'static str) -> Result<String, DecodeError> {
    let s = as_text(v, what, crate::limits::PATH_BYTES_MAX)?;
    crate::path::check_abs_path(&s)
        .and_then(|()| crate::text::check(&s))
        .map_err(|why| DecodeError::schema(what, why))?;
    Ok(s)
}

pub fn as_list<T>(
    v: Value,
    what: &'static str,
    max: usize,
    f: impl FnMut(Value) -> Result<T, DecodeError>,
) -> Result<Vec<T>, DecodeError> {
    match v {
        Value::Array(items) if items.len() <= max => items.into_iter().map(f).collect(),
        Value::Array(items) => Err(DecodeError::schema(
            what,
            format!("{} items > {max}", items.len()),
        )),
        _ => Err(DecodeError::schema(what, "expected an array")),
    }
}

/// Value constructors, so that building trees reads like the CDDL.
pub fn uint(n: u64) -> Value {
    Value::Integer(Integer::from(n))
}
pub fn bytes(b: &[u8]) -> Value {
    Value::Bytes(b.to_vec())
}
pub fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}
pub fn array(items: Vec<Value>) -> Value {
    Value::Array(items)
}
pub fn opt<T>(o: &Option<T>, f: impl FnOnce(&T) -> Value) -> Value {
    o.as_ref().map_or(Value::Null, f)
}
pub fn list<T: Canonical>(items: &[T]) -> Value {
    Value::Array(items.iter().map(Canonical::to_value).collect())
}
