//! A poll's records laid out for a host language without copying their bytes.
//!
//! A consumed record's key, value and header values are slices of one fetched
//! allocation ([`Record::buffer`]): the answer a fetch read, or a decompressed
//! batch. [`RecordViews`] hands out, for each distinct allocation of a poll,
//! the range its records use, and describes every record as positions in
//! those ranges (flat integer arrays, no per-record object). A binding then
//! crosses each range once, as an external buffer it keeps alive (Node) or
//! as one copy into its own heap (Go), and makes its records as views.

use bytes::Bytes;
use client::ErrorCode;

use crate::{Error, Record};

/// Words per record in [`RecordViews::index`].
pub const VIEW_STRIDE: usize = 9;
/// The length of a null key, value or header value.
pub const NULL_LENGTH: u32 = u32::MAX;

/// The records of one poll as ranges of their fetched buffers and flat arrays.
#[derive(Debug, Default)]
pub struct RecordViews {
    /// The distinct topics of the records; `index` names them by position.
    pub topics: Vec<String>,
    /// The bytes keys, values and header values lie in: for each fetched
    /// buffer, the range these records use (each starts at its first record's
    /// bytes, so two polls never hand out ranges with one start address);
    /// the last is the poll's own copies of records whose fields are not in
    /// their `buffer()` (never one a consumer decoded, so it is almost always
    /// empty).
    pub buffers: Vec<Bytes>,
    /// Every header key, back to back (keys are strings the core decoded).
    pub header_keys: Vec<u8>,
    /// [`VIEW_STRIDE`] words per record: topic position, partition, buffer
    /// position, key start, key length, value start, value length, first
    /// header, header count. Starts are in the record's buffer; a length of
    /// [`NULL_LENGTH`] is a null key or value.
    pub index: Vec<u32>,
    /// 4 words per header: key start and length (in `header_keys`), value
    /// start and length (in the record's buffer).
    pub headers: Vec<u32>,
    pub offsets: Vec<i64>,
    /// Milliseconds since the epoch.
    pub timestamps: Vec<i64>,
}

impl RecordViews {
    /// Lays out `records`. Refused (`InvalidRequest`, nothing laid out) only
    /// when a range, the copies or the header keys reach 4 GiB, which the
    /// 32-bit positions cannot say.
    pub fn new(records: &[Record]) -> Result<Self, Error> {
        let mut ranges = Ranges::default();
        let placements: Vec<Placement> = records
            .iter()
            .map(|record| {
                // The range of its buffer the record's fields cover, if they all lie in it.
                let (mut low, mut high) = (usize::MAX, 0);
                // An empty field is `Bytes::new()`, in no buffer: it needs no range.
                for field in fields(record).flatten().filter(|field| !field.is_empty()) {
                    let Some((start, length)) = record.span(field) else { return Placement::Copied };
                    (low, high) = (low.min(start), high.max(start + length));
                }
                Placement::Shared(ranges.take(record.buffer(), low, high))
            })
            .collect();
        let too_big =
            |what: &str| Error::new(ErrorCode::InvalidRequest, format!("a poll answered 4 GiB or more of {what}"));
        if ranges.buffers.iter().any(|(_, low, high)| high.saturating_sub(*low) >= NULL_LENGTH as usize) {
            return Err(too_big("records from one fetch"));
        }
        let copied_position = ranges.buffers.len();
        let mut copied: Vec<u8> = Vec::new();
        // (start, length) of `field` where its placement hands it out from.
        let mut place = |record: &Record, placement: &Placement, field: Option<&Bytes>| -> Result<[u32; 2], Error> {
            let Some(field) = field else { return Ok([0, NULL_LENGTH]) };
            if field.is_empty() {
                return Ok([0, 0]);
            }
            match placement {
                Placement::Shared(position) => {
                    let (start, length) = record.span(field).expect("checked when the placement was chosen");
                    Ok([(start - ranges.buffers[*position].1) as u32, length as u32])
                }
                Placement::Copied => {
                    if copied.len() + field.len() >= NULL_LENGTH as usize {
                        return Err(too_big("copied records"));
                    }
                    let start = copied.len() as u32;
                    copied.extend_from_slice(field);
                    Ok([start, field.len() as u32])
                }
            }
        };
        let mut views = RecordViews {
            index: Vec::with_capacity(records.len() * VIEW_STRIDE),
            offsets: Vec::with_capacity(records.len()),
            timestamps: Vec::with_capacity(records.len()),
            ..RecordViews::default()
        };
        for (record, placement) in records.iter().zip(&placements) {
            let topic = match views.topics.iter().position(|topic| **topic == *record.topic) {
                Some(position) => position,
                None => {
                    views.topics.push(record.topic.to_string());
                    views.topics.len() - 1
                }
            };
            let key = place(record, placement, record.key.as_ref())?;
            let value = place(record, placement, record.value.as_ref())?;
            let first_header = (views.headers.len() / 4) as u32;
            for (header_key, header_value) in &record.headers {
                if views.header_keys.len() + header_key.len() >= NULL_LENGTH as usize {
                    return Err(too_big("header keys"));
                }
                views.headers.extend([views.header_keys.len() as u32, header_key.len() as u32]);
                views.header_keys.extend_from_slice(header_key.as_bytes());
                views.headers.extend(place(record, placement, header_value.as_ref())?);
            }
            let position = match placement {
                Placement::Shared(position) => *position,
                Placement::Copied => copied_position,
            };
            views.index.extend([
                topic as u32,
                record.partition as u32,
                position as u32,
                key[0],
                key[1],
                value[0],
                value[1],
                first_header,
                record.headers.len() as u32,
            ]);
            views.offsets.push(record.offset);
            views.timestamps.push(record.timestamp_ms);
        }
        views.buffers = ranges
            .buffers
            .into_iter()
            .map(|(bytes, low, high)| if low >= high { Bytes::new() } else { bytes.slice(low..high) })
            .collect();
        views.buffers.push(Bytes::from(copied));
        Ok(views)
    }

    /// How many records these are.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }
}

/// Where the fetched buffers of a poll's records are, and which range of
/// each the records use.
#[derive(Default)]
struct Ranges {
    /// (the buffer, the lowest start used, the highest end used).
    buffers: Vec<(Bytes, usize, usize)>,
}

impl Ranges {
    /// The position of `buffer`, its range widened to take `low..high`.
    fn take(&mut self, buffer: &Bytes, low: usize, high: usize) -> usize {
        let same = |entry: &(Bytes, usize, usize)| entry.0.as_ptr() == buffer.as_ptr() && entry.0.len() == buffer.len();
        // Records of one fetch come together: the last buffer is almost always it.
        let position = match self.buffers.iter().rposition(same) {
            Some(position) => position,
            None => {
                self.buffers.push((buffer.clone(), usize::MAX, 0));
                self.buffers.len() - 1
            }
        };
        let entry = &mut self.buffers[position];
        (entry.1, entry.2) = (entry.1.min(low), entry.2.max(high));
        position
    }
}

/// The key, the value and the header values of a record, in that order.
fn fields(record: &Record) -> impl Iterator<Item = Option<&Bytes>> {
    let header_values = record.headers.iter().map(|(_, value)| value.as_ref());
    [record.key.as_ref(), record.value.as_ref()].into_iter().chain(header_values)
}

/// Where a record's fields are handed out from.
enum Placement {
    /// Views into the shared buffer at this position of `Ranges::buffers`.
    Shared(usize),
    /// Copies in the poll's own buffer.
    Copied,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field at (start, length) of `views`' buffer `position`.
    fn field(views: &RecordViews, position: u32, start: u32, length: u32) -> Option<Vec<u8>> {
        (length != NULL_LENGTH)
            .then(|| views.buffers[position as usize][start as usize..(start + length) as usize].to_vec())
    }

    #[test]
    fn records_outside_their_buffer_are_copied_and_read_back() {
        let mut first = Record::new("t", 3, 1 << 60, 1_700_000_000_000);
        first.value = Some(Bytes::from_static(b"value"));
        first.headers = vec![("h".into(), None), ("é".into(), Some(Bytes::from_static(b"x")))];
        let mut second = Record::new("other", 0, 7, -5);
        second.key = Some(Bytes::new());
        let views = RecordViews::new(&[first, second]).expect("lays out");
        assert_eq!(views.topics, ["t", "other"]);
        assert_eq!(views.offsets, [1 << 60, 7]);
        assert_eq!(views.timestamps, [1_700_000_000_000, -5]);
        let first = &views.index[..VIEW_STRIDE];
        assert_eq!(&first[..2], &[0, 3]);
        assert_eq!(first[2] as usize, views.buffers.len() - 1, "the copies come last");
        assert_eq!(field(&views, first[2], first[3], first[4]), None);
        assert_eq!(field(&views, first[2], first[5], first[6]).as_deref(), Some(&b"value"[..]));
        assert_eq!((first[7], first[8]), (0, 2));
        let header = |n: usize| &views.headers[n * 4..n * 4 + 4];
        let key = |n: usize| &views.header_keys[header(n)[0] as usize..(header(n)[0] + header(n)[1]) as usize];
        assert_eq!(key(0), b"h");
        assert_eq!(key(1), "é".as_bytes());
        assert_eq!(header(0)[3], NULL_LENGTH);
        assert_eq!(field(&views, first[2], header(1)[2], header(1)[3]).as_deref(), Some(&b"x"[..]));
        // An empty key lies in any buffer, the record's empty one too.
        let second = &views.index[VIEW_STRIDE..];
        assert_eq!(&second[..2], &[1, 0]);
        assert_eq!(field(&views, second[2], second[3], second[4]).as_deref(), Some(&b""[..]));
        assert_eq!(second[6], NULL_LENGTH);
        assert_eq!(second[8], 0);
    }

    #[test]
    fn nothing_lays_out_as_one_empty_copy_buffer() {
        let views = RecordViews::new(&[]).expect("lays out");
        assert!(views.is_empty());
        assert_eq!(views.buffers, [Bytes::new()]);
    }
}
