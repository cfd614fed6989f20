package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/coder/websocket"

	"github.com/outpost-exec/outpost/protocol"
)

// WSFrames carries one message per WebSocket message: text frames out,
// text or binary frames in.
type WSFrames struct {
	conn     *websocket.Conn
	maxBytes int64
	buf      []byte // the first FreeFrameBytes of every message; reused
	budget   *ReadBudget
	big      frameBuffer // the last message, when longer than buf
}

// NewWSFrames wraps an accepted or dialled WebSocket. Messages over
// maxBytes (0: protocol.MaxMessageBytes) are read to their end, dropped and
// reported as ErrMessageTooLarge; the connection stays up.
func NewWSFrames(c *websocket.Conn, maxBytes int64) *WSFrames {
	if maxBytes <= 0 {
		maxBytes = protocol.MaxMessageBytes
	}
	c.SetReadLimit(-1) // enforced below, without tearing the connection down
	return &WSFrames{conn: c, maxBytes: maxBytes}
}

// SetReadBudget makes ReadFrame reserve from b a message's bytes past
// FreeFrameBytes as they arrive (readbudget.go), until the next ReadFrame
// (a JSONConn releases them as soon as it has decoded the message). A
// message the budget cannot hold is freed and the rest of it discarded
// as it arrives; ReadFrame returns a *ReadBudgetError. Call it before the
// first ReadFrame; nil (the default) reserves nothing.
func (w *WSFrames) SetReadBudget(b *ReadBudget) { w.budget = b }

// ReadFrame reads one message. The frame is valid until the next call.
// The first FreeFrameBytes of a message are read into a buffer the
// WSFrames keeps; a longer message goes to a buffer of its own, grown as
// it arrives and dropped afterwards.
func (w *WSFrames) ReadFrame(ctx context.Context) ([]byte, error) {
	w.releaseFrame()
	w.big.b = nil
	_, r, err := w.conn.Reader(ctx)
	if err != nil {
		return nil, err
	}
	if w.buf == nil {
		w.buf = make([]byte, FreeFrameBytes)
	}
	limit := int(min(w.maxBytes, math.MaxInt-1)) + 1 // one byte past the limit proves it is over
	first, done, err := readMessagePart(r, w.buf[:min(len(w.buf), limit)])
	if err != nil {
		return nil, err
	}
	if done {
		return first, nil
	}
	if len(first) < limit {
		// Longer than buf: the rest into a buffer of its own.
		fb := frameBuffer{budget: w.budget, b: first}
		for len(fb.b) < limit {
			if err := fb.grow(len(fb.b)+1, limit); err != nil {
				fb.drop()
				if _, derr := io.Copy(io.Discard, r); derr != nil {
					return nil, derr
				}
				return nil, &droppedFrameError{err: err, head: w.buf}
			}
			var part []byte
			part, done, err = readMessagePart(r, fb.b[len(fb.b):cap(fb.b)])
			if err != nil {
				fb.drop()
				return nil, err
			}
			fb.b = fb.b[:len(fb.b)+len(part)]
			if done {
				w.big = fb
				return fb.b, nil
			}
		}
		fb.drop()
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w of %d bytes", ErrMessageTooLarge, w.maxBytes)
}

// readMessagePart fills p from a message reader; done says the message
// ended (within p, or exactly at its end, which is only known later).
func readMessagePart(r io.Reader, p []byte) (got []byte, done bool, err error) {
	n, err := io.ReadFull(r, p)
	switch err {
	case nil:
		return p[:n], false, nil
	case io.EOF, io.ErrUnexpectedEOF:
		return p[:n], true, nil
	}
	return nil, false, err
}

func (w *WSFrames) frameOwned() bool { return w.big.b != nil }

func (w *WSFrames) releaseFrame() { w.big.release() }

// WriteFrame sends one text message.
func (w *WSFrames) WriteFrame(ctx context.Context, b []byte) error {
	return w.conn.Write(ctx, websocket.MessageText, b)
}

// Close closes the WebSocket with a normal closure.
func (w *WSFrames) Close() error {
	return w.conn.Close(websocket.StatusNormalClosure, "")
}

// Conn returns the underlying WebSocket.
func (w *WSFrames) Conn() *websocket.Conn { return w.conn }

// LineFrames carries one message per line (stdio): '\n' terminated,
// blank lines skipped, each write flushed.
type LineFrames struct {
	r        *bufio.Reader
	w        io.Writer
	closer   io.Closer
	maxBytes int
	mu       sync.Mutex
	buf      []byte
	budget   *ReadBudget
	big      frameBuffer // the last line, when longer than the reader's buffer
}

// NewLineFrames reads lines from r and writes lines to w. closer, if not
// nil, is closed by Close.
func NewLineFrames(r io.Reader, w io.Writer, closer io.Closer, maxBytes int) *LineFrames {
	if maxBytes <= 0 {
		maxBytes = protocol.MaxMessageBytes
	}
	return &LineFrames{r: bufio.NewReaderSize(r, FreeFrameBytes), w: w, closer: closer, maxBytes: maxBytes}
}

// SetReadBudget makes ReadFrame reserve from b a line's bytes past
// FreeFrameBytes as they arrive, until the next ReadFrame (a JSONConn
// releases them once it has decoded the message). A line the budget
// cannot hold is freed and the rest of it discarded as it arrives;
// ReadFrame returns a *ReadBudgetError. Call it before the first
// ReadFrame; nil (the default) reserves nothing.
func (l *LineFrames) SetReadBudget(b *ReadBudget) { l.budget = b }

// ReadFrame reads the next non-blank line, without its "\n" or "\r\n".
// The context is not consulted: the read ends when the input does.
func (l *LineFrames) ReadFrame(ctx context.Context) ([]byte, error) {
	for {
		line, err := l.readLine()
		if err != nil {
			return nil, err
		}
		if len(trimSpace(line)) > 0 {
			return line, nil
		}
	}
}

// frameOwned: every line is in memory of its own.
func (l *LineFrames) frameOwned() bool { return true }

func (l *LineFrames) releaseFrame() { l.big.release() }

// readLine reads one line. A line that fits the reader's buffer is
// returned from it; a longer one is gathered in a buffer of its own.
func (l *LineFrames) readLine() ([]byte, error) {
	l.releaseFrame()
	l.big = frameBuffer{budget: l.budget}
	var line []byte
	var refused error // ErrMessageTooLarge or the budget's: the rest is discarded
	var head []byte
	for {
		part, err := l.r.ReadSlice('\n')
		switch {
		case refused != nil:
		case len(l.big.b)+len(part) > l.maxBytes+2: // +2: room for the "\r\n" cut below
			refused = ErrMessageTooLarge
			l.big.drop()
		case err == nil && l.big.b == nil:
			// The whole line was in the reader's buffer (at most
			// FreeFrameBytes): copied, as ReadSlice's result is only
			// valid until the next read.
			line = append([]byte(nil), part...)
		default:
			if gerr := l.big.grow(len(l.big.b)+len(part), l.maxBytes+2); gerr != nil {
				refused = gerr
				head = bytes.Clone(l.big.b[:min(len(l.big.b), FreeFrameBytes)])
				l.big.drop()
				break
			}
			l.big.b = append(l.big.b, part...)
			line = l.big.b
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF && (len(line) > 0 || refused != nil) {
			break // the last line has no newline
		}
		l.big.drop()
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte{'\n'})
	line = bytes.TrimSuffix(line, []byte{'\r'})
	switch {
	case refused == ErrMessageTooLarge, len(line) > l.maxBytes:
		l.big.drop()
		return nil, fmt.Errorf("%w of %d bytes", ErrMessageTooLarge, l.maxBytes)
	case refused != nil:
		return nil, &droppedFrameError{err: refused, head: head}
	}
	return line, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r' || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}

// WriteFrame writes b and a newline.
func (l *LineFrames) WriteFrame(ctx context.Context, b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(append(l.buf[:0], b...), '\n')
	_, err := l.w.Write(l.buf)
	return err
}

// Close closes the underlying closer, if any.
func (l *LineFrames) Close() error {
	if l.closer != nil {
		return l.closer.Close()
	}
	return nil
}
