package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/coder/websocket"

	"github.com/outpost-exec/outpost/protocol"
)

// WSFrames carries one message per WebSocket message: text frames out,
// text or binary frames in.
type WSFrames struct {
	conn     *websocket.Conn
	maxBytes int64
	buf      []byte // reused by ReadFrame
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

// ReadFrame reads one message. The frame is valid until the next call.
func (w *WSFrames) ReadFrame(ctx context.Context) ([]byte, error) {
	_, r, err := w.conn.Reader(ctx)
	if err != nil {
		return nil, err
	}
	if w.buf == nil {
		w.buf = make([]byte, 64<<10)
	}
	n := 0
	for {
		if n == len(w.buf) {
			if int64(n) > w.maxBytes {
				if _, err := io.Copy(io.Discard, r); err != nil {
					return nil, err
				}
				return nil, fmt.Errorf("%w of %d bytes", ErrMessageTooLarge, w.maxBytes)
			}
			grow := min(int64(len(w.buf)), w.maxBytes+1-int64(n))
			w.buf = append(w.buf, make([]byte, grow)...)
		}
		m, err := r.Read(w.buf[n:])
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(n) > w.maxBytes {
		return nil, fmt.Errorf("%w of %d bytes", ErrMessageTooLarge, w.maxBytes)
	}
	frame := w.buf[:n]
	if cap(w.buf) > 1<<20 {
		w.buf = nil // do not pin a huge buffer after one huge message
	}
	return frame, nil
}

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
}

// NewLineFrames reads lines from r and writes lines to w. closer, if not
// nil, is closed by Close.
func NewLineFrames(r io.Reader, w io.Writer, closer io.Closer, maxBytes int) *LineFrames {
	if maxBytes <= 0 {
		maxBytes = protocol.MaxMessageBytes
	}
	return &LineFrames{r: bufio.NewReaderSize(r, 64<<10), w: w, closer: closer, maxBytes: maxBytes}
}

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

func (l *LineFrames) readLine() ([]byte, error) {
	var line []byte
	tooLarge := false
	for {
		part, err := l.r.ReadSlice('\n')
		if !tooLarge {
			// +2: room for the "\r\n" cut below.
			if len(line)+len(part) > l.maxBytes+2 {
				tooLarge, line = true, nil
			} else {
				line = append(line, part...)
			}
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF && (len(line) > 0 || tooLarge) {
			break // the last line has no newline
		}
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte{'\n'})
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if tooLarge || len(line) > l.maxBytes {
		return nil, fmt.Errorf("%w of %d bytes", ErrMessageTooLarge, l.maxBytes)
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
