//! Bridges between blocking tar code (std::io) and async byte streams.

use std::io::{self, Read, Write};

use bytes::{Bytes, BytesMut};
use futures::Stream;
use tokio::sync::mpsc;

const CHUNK: usize = 64 * 1024;

/// A `Write` that sends 64 KiB chunks to an async receiver (blocking while it is full).
pub(crate) struct ChannelWriter {
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    buf: BytesMut,
}

impl ChannelWriter {
    pub(crate) fn new(tx: mpsc::Sender<Result<Bytes, io::Error>>) -> Self {
        Self {
            tx,
            buf: BytesMut::with_capacity(CHUNK),
        }
    }

    fn send_buf(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the receiver went away"))
    }

    /// Sends an error to the receiver instead of more data (the stream then fails).
    pub(crate) fn fail(self, error: io::Error) {
        let _ = self.tx.blocking_send(Err(error));
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = CHUNK - self.buf.len();
        let n = data.len().min(room);
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= CHUNK {
            self.send_buf()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_buf()
    }
}

/// A stream of the chunks a [`ChannelWriter`] sends.
pub(crate) fn receiver_stream(
    rx: mpsc::Receiver<Result<Bytes, io::Error>>,
) -> impl Stream<Item = Result<Bytes, io::Error>> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}

/// A `Read` over chunks sent from async code (blocking while none is there).
pub(crate) struct ChannelReader {
    rx: mpsc::Receiver<Result<Bytes, io::Error>>,
    current: Bytes,
}

impl ChannelReader {
    pub(crate) fn new(rx: mpsc::Receiver<Result<Bytes, io::Error>>) -> Self {
        Self {
            rx,
            current: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}
