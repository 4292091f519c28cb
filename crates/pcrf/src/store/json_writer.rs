//! Writes a stored blob as compact JSON, byte for byte what `serde_json`
//! writes, faster. `serde_json` escapes strings one byte at a time through
//! a lookup table and a few calls per string; a session blob is ~170
//! strings (mostly field names), so that was 13% of a Gx request's
//! instructions (callgrind, BENCHMARKS.md). Here clean runs of 8 bytes are
//! recognised with word arithmetic and copied at once.
//!
//! Only what the stored records use is written here; anything else (a map
//! key that is not a string or an integer, a custom error) makes `encode`
//! start again with `serde_json`, so the output and the errors are always
//! `serde_json`'s. The tests compare the two writers on every record type.

use serde::ser::{self, Serialize};
use std::fmt;

/// `serde_json`'s marker for a `RawValue`: its text goes out as it is.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Writes `value` as `serde_json::to_writer` would into `out`.
pub(crate) fn encode<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
) -> serde_json::Result<()> {
    let start = out.len();
    if value.serialize(&mut Writer { out }).is_ok() {
        return Ok(());
    }
    out.truncate(start);
    serde_json::to_writer(out, value)
}

/// "Not here: let serde_json do it."
#[derive(Debug)]
pub(crate) struct Fallback;

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("left to serde_json")
    }
}

impl std::error::Error for Fallback {}

impl ser::Error for Fallback {
    fn custom<M: fmt::Display>(_: M) -> Fallback {
        Fallback
    }
}

type Result<T = ()> = std::result::Result<T, Fallback>;

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether any of the 8 bytes of `w` must be escaped: a control character
/// (< 0x20), `"` or `\`. Bytes of 0x80 and above (UTF-8) never match.
#[inline]
fn needs_escape(w: u64) -> bool {
    let below_space = w.wrapping_sub(ONES * 0x20) & !w;
    let x = w ^ (ONES * u64::from(b'"'));
    let quote = x.wrapping_sub(ONES) & !x;
    let y = w ^ (ONES * u64::from(b'\\'));
    let backslash = y.wrapping_sub(ONES) & !y;
    (below_space | quote | backslash) & HIGHS != 0
}

/// Appends `s` between quotes, escaped as `serde_json` escapes it.
fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    if is_clean(bytes) {
        out.extend_from_slice(bytes);
    } else {
        write_escaped(out, bytes);
    }
    out.push(b'"');
}

fn word(eight: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(eight);
    u64::from_le_bytes(w)
}

/// Whether `bytes` needs no escape, 8 bytes at a time.
fn is_clean(bytes: &[u8]) -> bool {
    let mut chunks = bytes.chunks_exact(8);
    if chunks.any(|c| needs_escape(word(c))) {
        return false;
    }
    let rest = chunks.remainder();
    if rest.is_empty() {
        return true;
    }
    if let Some(last) = bytes.len().checked_sub(8) {
        // The last 8 bytes, overlapping bytes already known clean.
        return !needs_escape(word(&bytes[last..]));
    }
    // Shorter than a word: padded with spaces (byte by byte, not a
    // memcpy call for a few bytes).
    let mut w = ONES * u64::from(b' ');
    for (k, &b) in rest.iter().enumerate() {
        let shift = 8 * k;
        w = (w & !(0xff << shift)) | (u64::from(b) << shift);
    }
    !needs_escape(w)
}

/// The slow path, for strings that hold an escape: byte by byte.
fn write_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut clean = 0; // bytes[..clean] are written
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"", // \u00XX, below
            _ => continue,
        };
        out.extend_from_slice(&bytes[clean..i]);
        clean = i + 1;
        if short.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        } else {
            out.extend_from_slice(short);
        }
    }
    out.extend_from_slice(&bytes[clean..]);
}

fn write_int<I: itoa::Integer>(out: &mut Vec<u8>, n: I) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Floats are rare in the records: `serde_json` writes them (and `null`
/// for the non-finite), so its number format is kept exactly.
fn write_float<F: Serialize>(out: &mut Vec<u8>, f: F) -> Result {
    serde_json::to_writer(out, &f).map_err(|_| Fallback)
}

/// `serialize_<integer>` for every integer type, each calling `self.$by`.
macro_rules! integers {
    ($by:ident) => {
        integers!(@each $by; serialize_i8 i8, serialize_i16 i16, serialize_i32 i32,
            serialize_i64 i64, serialize_i128 i128, serialize_u8 u8, serialize_u16 u16,
            serialize_u32 u32, serialize_u64 u64, serialize_u128 u128);
    };
    (@each $by:ident; $($method:ident $t:ty),*) => {
        $(fn $method(self, v: $t) -> Result {
            self.$by(v)
        })*
    };
}

impl Writer<'_> {
    fn int<I: itoa::Integer>(&mut self, n: I) -> Result {
        write_int(self.out, n);
        Ok(())
    }

    /// `{"variant":` and `open`: serde_json's externally tagged enums.
    fn tagged(&mut self, variant: &str, open: &[u8]) {
        self.out.push(b'{');
        write_str(self.out, variant);
        self.out.push(b':');
        self.out.extend_from_slice(open);
    }
}

impl<'a, 'b> ser::Serializer for &'a mut Writer<'b> {
    type Ok = ();
    type Error = Fallback;
    type SerializeSeq = Compound<'a, 'b>;
    type SerializeTuple = Compound<'a, 'b>;
    type SerializeTupleStruct = Compound<'a, 'b>;
    type SerializeTupleVariant = Compound<'a, 'b>;
    type SerializeMap = Compound<'a, 'b>;
    type SerializeStruct = Compound<'a, 'b>;
    type SerializeStructVariant = Compound<'a, 'b>;

    fn serialize_bool(self, v: bool) -> Result {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    integers!(int);
    fn serialize_f32(self, v: f32) -> Result {
        write_float(self.out, v)
    }
    fn serialize_f64(self, v: f64) -> Result {
        write_float(self.out, v)
    }
    fn serialize_char(self, v: char) -> Result {
        write_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result {
        write_str(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result {
        let mut seq = ser::Serializer::serialize_seq(self, Some(v.len()))?;
        for b in v {
            ser::SerializeSeq::serialize_element(&mut seq, b)?;
        }
        ser::SerializeSeq::end(seq)
    }
    fn serialize_none(self) -> Result {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result {
        self.tagged(variant, b"");
        value.serialize(&mut *self)?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'a, 'b>> {
        self.out.push(b'[');
        Ok(Compound::new(self, b"]"))
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'a, 'b>> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Compound<'a, 'b>> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a, 'b>> {
        self.tagged(variant, b"[");
        Ok(Compound::new(self, b"]}"))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'a, 'b>> {
        self.out.push(b'{');
        Ok(Compound::new(self, b"}"))
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Compound<'a, 'b>> {
        if name == RAW_VALUE_TOKEN {
            return Ok(Compound::raw(self));
        }
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a, 'b>> {
        self.tagged(variant, b"{");
        Ok(Compound::new(self, b"}}"))
    }
}

/// A sequence, map or struct being written: commas between members, the
/// closing bytes at the end.
pub(crate) struct Compound<'a, 'b> {
    w: &'a mut Writer<'b>,
    first: bool,
    close: &'static [u8],
    /// A `RawValue`: its one field's text is written as it is.
    raw: bool,
}

impl<'a, 'b> Compound<'a, 'b> {
    fn new(w: &'a mut Writer<'b>, close: &'static [u8]) -> Self {
        Compound {
            w,
            first: true,
            close,
            raw: false,
        }
    }

    fn raw(w: &'a mut Writer<'b>) -> Self {
        Compound {
            w,
            first: true,
            close: b"",
            raw: true,
        }
    }

    fn comma(&mut self) {
        if !std::mem::take(&mut self.first) {
            self.w.out.push(b',');
        }
    }

    fn end(self) -> Result {
        self.w.out.extend_from_slice(self.close);
        Ok(())
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        self.comma();
        value.serialize(&mut *self.w)
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result {
        if self.raw {
            return value.serialize(Key {
                out: self.w.out,
                raw: true,
            });
        }
        self.comma();
        write_str(self.w.out, key);
        self.w.out.push(b':');
        value.serialize(&mut *self.w)
    }
}

/// The serde traits of a sequence or a struct: they differ in names only.
macro_rules! compound {
    ($($trait:ident::$method:ident($($key:ident)?);)*) => {
        $(impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = Fallback;
            fn $method<T: Serialize + ?Sized>(&mut self, $($key: &'static str,)? value: &T) -> Result {
                compound!(@write self $($key)? value)
            }
            fn end(self) -> Result {
                Compound::end(self)
            }
        })*
    };
    (@write $self:ident $key:ident $value:ident) => { $self.field($key, $value) };
    (@write $self:ident $value:ident) => { $self.element($value) };
}

compound! {
    SerializeSeq::serialize_element();
    SerializeTuple::serialize_element();
    SerializeTupleStruct::serialize_field();
    SerializeTupleVariant::serialize_field();
    SerializeStruct::serialize_field(key);
    SerializeStructVariant::serialize_field(key);
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Fallback;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result {
        self.comma();
        key.serialize(Key {
            out: self.w.out,
            raw: false,
        })?;
        self.w.out.push(b':');
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        value.serialize(&mut *self.w)
    }
    fn end(self) -> Result {
        Compound::end(self)
    }
}

/// A map key: strings (and what serializes as one) and integers, quoted,
/// as `serde_json` writes them; any other key is left to `serde_json`.
/// With `raw`, the text of a `RawValue` (a string that is JSON already),
/// written as it is.
struct Key<'a> {
    out: &'a mut Vec<u8>,
    raw: bool,
}

impl Key<'_> {
    fn quoted_int<I: itoa::Integer>(self, n: I) -> Result {
        if self.raw {
            return Err(Fallback);
        }
        self.out.push(b'"');
        write_int(self.out, n);
        self.out.push(b'"');
        Ok(())
    }
}

/// Methods that leave the value to `serde_json`.
macro_rules! left_to_serde_json {
    ($($name:ident($($arg:ty),*) -> $ret:ty;)*) => {
        $(fn $name(self, $(_: $arg),*) -> Result<$ret> {
            Err(Fallback)
        })*
    };
}

impl ser::Serializer for Key<'_> {
    type Ok = ();
    type Error = Fallback;
    type SerializeSeq = ser::Impossible<(), Fallback>;
    type SerializeTuple = ser::Impossible<(), Fallback>;
    type SerializeTupleStruct = ser::Impossible<(), Fallback>;
    type SerializeTupleVariant = ser::Impossible<(), Fallback>;
    type SerializeMap = ser::Impossible<(), Fallback>;
    type SerializeStruct = ser::Impossible<(), Fallback>;
    type SerializeStructVariant = ser::Impossible<(), Fallback>;

    fn serialize_str(self, v: &str) -> Result {
        match self.raw {
            true => self.out.extend_from_slice(v.as_bytes()),
            false => write_str(self.out, v),
        }
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result {
        match self.raw {
            true => Err(Fallback),
            false => self.serialize_str(v.encode_utf8(&mut [0; 4])),
        }
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result {
        match self.raw {
            true => Err(Fallback),
            false => self.serialize_str(variant),
        }
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result {
        match self.raw {
            true => Err(Fallback),
            false => value.serialize(self),
        }
    }
    integers!(quoted_int);

    left_to_serde_json! {
        serialize_bool(bool) -> ();
        serialize_f32(f32) -> ();
        serialize_f64(f64) -> ();
        serialize_bytes(&[u8]) -> ();
        serialize_none() -> ();
        serialize_unit() -> ();
        serialize_unit_struct(&'static str) -> ();
        serialize_seq(Option<usize>) -> Self::SerializeSeq;
        serialize_tuple(usize) -> Self::SerializeTuple;
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant;
        serialize_map(Option<usize>) -> Self::SerializeMap;
        serialize_struct(&'static str, usize) -> Self::SerializeStruct;
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant;
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result {
        Err(Fallback)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result {
        Err(Fallback)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fixtures;
    use serde::Serialize;
    use serde_json::json;
    use std::collections::BTreeMap;

    /// Ours and serde_json's bytes for `value`.
    fn both<T: Serialize + ?Sized>(value: &T) -> (Vec<u8>, Vec<u8>) {
        let mut ours = b"prefix".to_vec();
        let ours_ok = encode(&mut ours, value).is_ok();
        let theirs = serde_json::to_vec(value);
        assert_eq!(
            ours_ok,
            theirs.is_ok(),
            "one writer failed, the other did not"
        );
        assert!(ours.starts_with(b"prefix"), "encode must only append");
        (ours[6..].to_vec(), theirs.unwrap_or_default())
    }

    fn same<T: Serialize + ?Sized>(value: &T) {
        let (ours, theirs) = both(value);
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs)
        );
    }

    /// Whether the fast path wrote it (no fallback to serde_json).
    fn fast<T: Serialize + ?Sized>(value: &T) -> bool {
        let mut out = Vec::new();
        value.serialize(&mut Writer { out: &mut out }).is_ok()
    }

    #[test]
    fn every_stored_record_is_written_as_serde_json_writes_it() {
        let mut skipped = 0;
        let id = "pgw-2.bench.test;82540084;199";
        let session = crate::store::blob::decode_session(
            &mut skipped,
            id,
            crate::store::blob::tests::BEFORE_RAW_INPUTS.as_bytes(),
        )
        .expect("the sample session decodes");
        assert!(session.last_decision.is_some() && session.last_answer.is_some());
        same(&session);
        assert!(fast(&session), "a real session must not need the fallback");

        let mut odd = fixtures::session("pgw1;1;\"quoted\"\\", "001010000000001", 5);
        odd.device = Some("tab\there, newline\n, bell\u{7}, del\u{7f}, é, 日本".into());
        odd.ms_timezone = Some(String::new());
        same(&odd);
        same(&fixtures::subscriber("001010000000002"));
        let usage = fixtures::usage("001010000000003", 123_456_789);
        same(&usage);
        assert!(fast(&usage));
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        // Every ASCII byte and a few multi-byte characters, at every
        // offset of the 8-byte words and in every length of a tail.
        let alphabet: Vec<char> = (0u8..0x80)
            .map(char::from)
            .chain(['é', '€', '𝄞', '\u{2028}'])
            .collect();
        for &c in &alphabet {
            for before in 0..10 {
                for after in 0..10 {
                    let s: String = std::iter::repeat_n('a', before)
                        .chain([c])
                        .chain(std::iter::repeat_n('b', after))
                        .collect();
                    same(&s);
                    same(&c);
                }
            }
        }
        same("");
        same(&"\"\\\u{0}\u{1f}".repeat(20));
    }

    #[test]
    fn every_shape_serde_has_is_written_as_serde_json_writes_it() {
        #[derive(Serialize)]
        enum E {
            Unit,
            Newtype(u8),
            Tuple(i32, String),
            Struct { a: Option<u8>, b: f64 },
        }
        #[derive(Serialize)]
        struct Newtype(String);
        #[derive(Serialize)]
        struct Unit;
        #[derive(Serialize)]
        struct Tuple(u8, Vec<E>);
        #[derive(Serialize)]
        struct All<'a> {
            e: Vec<E>,
            n: Newtype,
            u: Unit,
            t: Tuple,
            unit: (),
            tuple: (u8, char, bool),
            #[serde(with = "serde_bytes_like")]
            bytes: &'a [u8],
            ints: (i8, i16, i32, i64, i128, u8, u16, u32, u64, u128),
            extremes: (i64, u64, i128, u128),
            floats: (f32, f64, f64, f64, f64),
            raw: Box<serde_json::value::RawValue>,
            int_keys: BTreeMap<u32, &'a str>,
            neg_keys: BTreeMap<i64, ()>,
            enum_keys: BTreeMap<K, u8>,
            value: serde_json::Value,
        }
        #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
        enum K {
            First,
            Second,
        }
        mod serde_bytes_like {
            pub fn serialize<S: serde::Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(b)
            }
        }
        let all = All {
            e: vec![
                E::Unit,
                E::Newtype(7),
                E::Tuple(-1, "x\"y".into()),
                E::Struct { a: None, b: 0.1 },
                E::Struct {
                    a: Some(3),
                    b: f64::NAN,
                },
            ],
            n: Newtype("n\u{1}".into()),
            u: Unit,
            t: Tuple(1, vec![]),
            unit: (),
            tuple: (0, '"', false),
            bytes: &[0, 1, 255],
            ints: (-8, -16, -32, -64, -128, 8, 16, 32, 64, 128),
            extremes: (i64::MIN, u64::MAX, i128::MIN, u128::MAX),
            floats: (1.5, -0.0, 1e300, f64::INFINITY, 123_456_789.125),
            raw: serde_json::value::to_raw_value(&json!({"k": [1, "two", null]}))
                .expect("raw value"),
            int_keys: [(1, "one"), (20, "twenty")].into_iter().collect(),
            neg_keys: [(-5, ())].into_iter().collect(),
            enum_keys: [(K::First, 1), (K::Second, 2)].into_iter().collect(),
            value: json!({"a\"b": [1, 2.5, -3, true, null, {"": "\u{7f}"}], "z": {}}),
        };
        same(&all);
        assert!(fast(&all));
    }

    #[test]
    fn what_it_does_not_write_is_left_to_serde_json() {
        // Keys serde_json accepts that this writer leaves to it.
        let bool_keys: BTreeMap<bool, u8> = [(false, 0), (true, 1)].into_iter().collect();
        assert!(!fast(&bool_keys));
        same(&bool_keys);
        // Keys serde_json refuses: both fail.
        let vec_keys: BTreeMap<Vec<u8>, u8> = [(vec![1], 1)].into_iter().collect();
        let mut out = Vec::new();
        assert!(encode(&mut out, &vec_keys).is_err());
        assert!(serde_json::to_vec(&vec_keys).is_err());
    }
}
