package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/outpost-exec/outpost/protocol"
)

// The native codec: length-prefixed msgpack frames, carried on mux
// streams inside a Noise-encrypted TCP connection.
//
// A stream is a sequence of frames:
//
//	frame = length body
//	length: uint32, big-endian; 1 <= length <= the frame limit
//	        (protocol.MaxMessageBytes unless configured lower)
//	body:   length bytes, one msgpack array of exactly 4 elements
//
//	body = [kind, id, method, payload]
//
//	kind 1  request       [1, id,  method, params]          params nil when absent
//	kind 2  notification  [2, nil, method, params]          params nil when absent
//	kind 3  result        [3, id,  "",     result]
//	kind 4  error         [4, id,  "",     {code, message, data?}]
//
// kind is an unsigned integer. id is an integer that fits in an int64 or
// a string, and nil exactly for notifications. method is a string, not
// empty for requests and notifications, empty for responses. payload is
// any msgpack value; structs travel as maps keyed by their msgpack tags,
// []byte as bin. An error object is a map: protocol.Error's msgpack tags;
// outpost's errors carry data {kind: "..."} (protocol.ErrorData), which a
// reader keeps as a map[string]any for protocol.KindOf.
//
// Any integer width is accepted for kind and id, and any str width for id
// and method. An error object's data that is valid msgpack but does not
// decode into an any (a map with integer keys) is kept as a
// msgpack.RawMessage.
//
// A reader rejects, as a *MalformedError, a body that is anything else: a
// body that is not a 4-element array, bytes after the array, an unknown
// kind, an id or method of the wrong type (an unsigned id over
// math.MaxInt64 included), an error object that is not a map, an
// extension type (0xc7-0xc9, 0xd4-0xd8: the protocol has no use for them)
// or the unused code 0xc1 anywhere, nesting deeper than msgpackMaxDepth or
// more than protocol.MaxJSONValues values (the JSON codec's bound, so a
// small message cannot make a decoder allocate without bound), an array,
// map, str or bin that claims more than the body has left. A malformed
// frame costs the connection nothing: framing does not depend on the
// body, and the next frame is read normally. Neither does a frame over the
// limit, whose body is discarded unread, nor an empty one, nor one that
// a ReadBudget cannot hold (dropped part way, SetReadBudget). A stream
// that ends inside a frame is broken: io.ErrUnexpectedEOF.
//
// A body's buffer is allocated as its bytes arrive (frameGrowth: at most
// FreeFrameBytes up front, then at most 4× what has arrived), fresh for
// every frame and never kept by the conn: a peer that announces a large
// frame and stalls gets little memory, and none once it leaves.
//
// Writes put a whole frame, header and body, into one Write call, so
// concurrent writers never interleave. A writer refuses what a reader
// would reject (so no time.Time: msgpack encodes it as an extension).

// Frame layout.
const (
	msgpackHeaderLen = 4 // length:uint32 big-endian, counts the body only
)

// Body layout: array of msgpackBodyLen elements, indexed below.
const (
	msgpackBodyLen = 4
	// [0] kind
	msgpackKindRequest      = 1 // [1, id, method, params]
	msgpackKindNotification = 2 // [2, nil, method, params]
	msgpackKindResult       = 3 // [3, id, "", result]
	msgpackKindError        = 4 // [4, id, "", {code, message, data?}]
	// [1] id:      int64 | string | nil (nil exactly for notifications)
	// [2] method:  string ("" for responses)
	// [3] payload: any msgpack value; nil means absent
)

// Decoder bounds.
const (
	// msgpackMaxDepth bounds nesting; the scan is iterative, but the
	// reflection decoder behind Params.Decode recurses.
	msgpackMaxDepth = 10000
	// msgpackMaxValues bounds the values in one body (keys count).
	msgpackMaxValues = protocol.MaxJSONValues
	// msgpackShrinkAbove: a write buffer grown past this by one large
	// message is dropped afterwards rather than kept for the connection's
	// lifetime.
	msgpackShrinkAbove = 1 << 20
)

// MsgpackConn is a MessageConn speaking the native msgpack codec over a
// byte stream. One goroutine may read while others write; writes are
// serialised by a mutex.
//
// The context of ReadMessage and of the Write methods is checked before
// the I/O starts and not consulted during it: a blocked call ends when the
// stream delivers, fails or is closed (close the conn, or the mux
// session, to interrupt it).
type MsgpackConn struct {
	rw       io.ReadWriteCloser
	maxFrame int
	budget   *ReadBudget // frames' bytes past FreeFrameBytes; nil: none

	rhdr [msgpackHeaderLen]byte // used by the reader goroutine only
	// skip is the body of a refused (oversized) frame, still to be
	// discarded before the next header: the refusal is reported at once,
	// not after a peer that declared 4 GiB has sent them.
	skip int64

	wmu  sync.Mutex
	wbuf bytes.Buffer     // header and body of the frame being written
	enc  *msgpack.Encoder // writes to wbuf
	werr error            // sticky: a failed Write may have left half a frame
}

// NewMsgpackConn wraps rw. Frames over maxFrame bytes (<= 0:
// protocol.MaxMessageBytes) are refused in both directions. rw should be
// buffered (a mux stream is): a frame is read with two Reads.
func NewMsgpackConn(rw io.ReadWriteCloser, maxFrame int) *MsgpackConn {
	c := &MsgpackConn{rw: rw, maxFrame: msgpackFrameLimit(maxFrame)}
	c.enc = msgpack.NewEncoder(&c.wbuf)
	c.enc.UseCompactInts(true)
	return c
}

// SetReadBudget makes the reader reserve from b each frame's bytes past
// FreeFrameBytes as its buffer grows, and release them once the frame is
// decoded or dropped (readbudget.go). A frame the budget cannot hold is
// dropped at once, what had arrived of it freed and the rest discarded
// unread by the next ReadMessage: ReadMessage returns a *MalformedError
// wrapping a *ReadBudgetError, with the request's id when the part read
// names it. Call it before the first ReadMessage; nil (the default)
// reserves nothing.
func (c *MsgpackConn) SetReadBudget(b *ReadBudget) { c.budget = b }

func msgpackFrameLimit(maxFrame int) int {
	if maxFrame <= 0 {
		return protocol.MaxMessageBytes
	}
	return int(min(int64(maxFrame), math.MaxUint32))
}

// ReadMessage reads and decodes the next frame. A frame that is empty, too
// large or undecodable yields a *MalformedError and the stream stays in
// sync (an oversized frame is refused as soon as its header is read, and
// its body skipped by the next call); io.EOF means the stream ended cleanly between frames, and
// io.ErrUnexpectedEOF that it ended inside one.
func (c *MsgpackConn) ReadMessage(ctx context.Context) (*Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if n := c.skip; n > 0 {
		c.skip = 0
		if _, err := io.CopyN(io.Discard, c.rw, n); err != nil {
			return nil, msgpackNoEOF(err)
		}
	}
	if _, err := io.ReadFull(c.rw, c.rhdr[:]); err != nil {
		return nil, err // io.EOF before the first byte, io.ErrUnexpectedEOF after
	}
	n := int64(binary.BigEndian.Uint32(c.rhdr[:]))
	if n > int64(c.maxFrame) {
		c.skip = n
		return nil, &MalformedError{Err: fmt.Errorf("msgpack frame of %d bytes: %w (limit %d bytes)", n, ErrMessageTooLarge, c.maxFrame)}
	}
	if n == 0 {
		return nil, &MalformedError{Err: errors.New("msgpack frame of length 0")}
	}
	// A fresh body per frame: the message's params alias it. Nothing of
	// it stays with the conn: once decoded the message holds it, and the
	// budget has it back.
	fb := frameBuffer{budget: c.budget}
	err := fillFrame(c.rw, &fb, int(n))
	var be *ReadBudgetError
	if errors.As(err, &be) {
		have := len(fb.b)
		id, isReq := msgpackPrefixID(fb.b)
		fb.release()
		c.skip = n - int64(have)
		return nil, &MalformedError{Err: fmt.Errorf("msgpack frame of %d bytes dropped after %d: %w", n, have, err), ID: id, HasID: isReq}
	}
	if err != nil {
		fb.release()
		return nil, err
	}
	m, err := DecodeMsgpackMessage(fb.b)
	fb.release()
	if err != nil {
		return nil, &MalformedError{Err: fmt.Errorf("failed to parse msgpack message: %w", err)}
	}
	return m, nil
}

// WriteResult sends a result response.
func (c *MsgpackConn) WriteResult(ctx context.Context, id ID, result any) error {
	return c.write(ctx, msgpackKindResult, id, "", result)
}

// WriteError sends an error response.
func (c *MsgpackConn) WriteError(ctx context.Context, id ID, e *protocol.Error) error {
	if e == nil {
		return errors.New("msgpack: WriteError with a nil error object")
	}
	return c.write(ctx, msgpackKindError, id, "", e)
}

// WriteNotification sends a notification.
func (c *MsgpackConn) WriteNotification(ctx context.Context, method string, params any) error {
	return c.write(ctx, msgpackKindNotification, ID{}, method, params)
}

// WriteRequest sends a request.
func (c *MsgpackConn) WriteRequest(ctx context.Context, id ID, method string, params any) error {
	return c.write(ctx, msgpackKindRequest, id, method, params)
}

// Call sends a request and reads the next message, its reply. A peer
// that answers and hangs up at once can make the write report a closed
// session although the request went out and the reply arrived; the
// reply, when it can still be read, wins over that error.
func (c *MsgpackConn) Call(ctx context.Context, id ID, method string, params any) (*Message, error) {
	werr := c.WriteRequest(ctx, id, method, params)
	c.wmu.Lock()
	sent := werr == nil || c.werr != nil // a transport error: it may have gone out
	c.wmu.Unlock()
	if !sent {
		return nil, werr // refused before sending (encoding, size, ctx)
	}
	m, rerr := c.ReadMessage(ctx)
	switch {
	case rerr == nil:
		return m, nil
	case werr != nil:
		return nil, werr
	default:
		return nil, rerr
	}
}

// Close closes the underlying stream.
func (c *MsgpackConn) Close() error { return c.rw.Close() }

func (c *MsgpackConn) write(ctx context.Context, kind uint8, id ID, method string, payload any) error {
	return c.writeFrames(ctx, func(add func(kind uint8, id ID, method string, payload any) error) error {
		return add(kind, id, method, payload)
	})
}

// Notification is one message for WriteNotifications.
type Notification struct {
	Method string
	Params any
}

// WriteNotifications writes several notifications with a single Write
// call, so a burst of small events costs one stream write, not many.
func (c *MsgpackConn) WriteNotifications(ctx context.Context, ns []Notification) error {
	return c.writeFrames(ctx, func(add func(kind uint8, id ID, method string, payload any) error) error {
		for _, n := range ns {
			if err := add(msgpackKindNotification, ID{}, n.Method, n.Params); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeFrames encodes the frames fill adds into the write buffer and sends
// them with one Write.
func (c *MsgpackConn) writeFrames(ctx context.Context, fill func(add func(kind uint8, id ID, method string, payload any) error) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	defer func() {
		if c.wbuf.Cap() > msgpackShrinkAbove*4 {
			c.wbuf = bytes.Buffer{} // the encoder holds &c.wbuf, which stays valid
		}
	}()
	c.wbuf.Reset()
	// A file block is not copied into wbuf: its frame is encoded up to
	// the chunk's bin header, and the chunk is written after that part
	// from where it is (tails[i] follows wbuf up to cuts[i]).
	var cuts []int
	var tails [][]byte
	add := func(kind uint8, id ID, method string, payload any) error {
		if (kind == msgpackKindRequest || kind == msgpackKindNotification) && method == "" {
			return errors.New("msgpack: method must not be empty")
		}
		start := c.wbuf.Len()
		c.wbuf.Write(make([]byte, msgpackHeaderLen)) // the length, filled in below
		if chunk, ok := blockChunk(payload); ok {
			if err := encodeMsgpackBody(c.enc, kind, id, method, nil); err != nil {
				return fmt.Errorf("msgpack: encoding %s: %w", msgpackKindName(kind), err)
			}
			c.wbuf.Truncate(c.wbuf.Len() - 1) // the nil payload
			appendBlockHead(&c.wbuf, payload, len(chunk))
			frame := c.wbuf.Bytes()[start:]
			n := len(frame) - msgpackHeaderLen + len(chunk)
			if n > c.maxFrame {
				c.wbuf.Truncate(start)
				return fmt.Errorf("outbound msgpack %s of %d bytes: %w (limit %d bytes)", msgpackKindName(kind), n, ErrMessageTooLarge, c.maxFrame)
			}
			binary.BigEndian.PutUint32(frame, uint32(n))
			cuts, tails = append(cuts, c.wbuf.Len()), append(tails, chunk)
			return nil
		}
		if err := encodeMsgpackBody(c.enc, kind, id, method, payload); err != nil {
			return fmt.Errorf("msgpack: encoding %s: %w", msgpackKindName(kind), err)
		}
		frame := c.wbuf.Bytes()[start:]
		// Hold the body to the reader's rules, so a frame this writes is
		// never malformed to the peer: a RawMessage payload is written
		// verbatim, and time.Time would become an extension type. The scan
		// skips strings and bins in O(1), so output chunks cost nothing.
		budget := msgpackMaxValues
		if end, err := scanMsgpack(frame[msgpackHeaderLen:], &budget); err != nil || end != len(frame)-msgpackHeaderLen {
			if err == nil {
				err = errors.New("a payload holds more than one msgpack value")
			}
			return fmt.Errorf("msgpack: encoding %s: %w", msgpackKindName(kind), err)
		}
		n := len(frame) - msgpackHeaderLen
		if n > c.maxFrame {
			return fmt.Errorf("outbound msgpack %s of %d bytes: %w (limit %d bytes)", msgpackKindName(kind), n, ErrMessageTooLarge, c.maxFrame)
		}
		binary.BigEndian.PutUint32(frame, uint32(n))
		return nil
	}
	if err := fill(add); err != nil {
		return err
	}
	out, from := c.wbuf.Bytes(), 0
	for i, cut := range cuts {
		if _, err := c.rw.Write(out[from:cut]); err != nil {
			c.werr = fmt.Errorf("msgpack: earlier write failed: %w", err)
			return err
		}
		if _, err := c.rw.Write(tails[i]); err != nil {
			c.werr = fmt.Errorf("msgpack: earlier write failed: %w", err)
			return err
		}
		from = cut
	}
	if from < len(out) {
		if _, err := c.rw.Write(out[from:]); err != nil {
			c.werr = fmt.Errorf("msgpack: earlier write failed: %w", err)
			return err
		}
	}
	return nil
}

// blockChunkMin: chunks from this size are written from where they are
// rather than copied into the frame buffer.
const blockChunkMin = 64 << 10

// blockChunk is the chunk of an fs/readBlock result or fs/writeBlock
// params worth writing without a copy.
func blockChunk(payload any) ([]byte, bool) {
	var chunk []byte
	switch p := payload.(type) {
	case protocol.FsReadBlockResult:
		chunk = p.Chunk
	case *protocol.FsReadBlockResult:
		if p != nil {
			chunk = p.Chunk
		}
	case protocol.FsWriteBlockParams:
		chunk = p.Chunk
	case *protocol.FsWriteBlockParams:
		if p != nil {
			chunk = p.Chunk
		}
	}
	return chunk, len(chunk) >= blockChunkMin && len(chunk) <= math.MaxUint32
}

// appendBlockHead encodes payload (one blockChunk accepts) as a map whose
// last entry is the chunk, up to and including the chunk's bin32 header:
// the chunk's n bytes follow. The decoders take the fields in any order.
func appendBlockHead(b *bytes.Buffer, payload any, n int) {
	switch p := payload.(type) {
	case *protocol.FsReadBlockResult:
		appendBlockHead(b, *p, n)
		return
	case *protocol.FsWriteBlockParams:
		appendBlockHead(b, *p, n)
		return
	case protocol.FsReadBlockResult:
		b.WriteByte(0x82) // fixmap of 2
		appendMsgpackStr(b, "eof")
		if p.EOF {
			b.WriteByte(0xc3)
		} else {
			b.WriteByte(0xc2)
		}
	case protocol.FsWriteBlockParams:
		b.WriteByte(0x83) // fixmap of 3
		appendMsgpackStr(b, "handleId")
		appendMsgpackStr(b, p.HandleID)
		appendMsgpackStr(b, "offset")
		b.WriteByte(0xcf) // uint64
		b.Write(binary.BigEndian.AppendUint64(nil, p.Offset))
	}
	appendMsgpackStr(b, "chunk")
	b.WriteByte(0xc6) // bin32
	b.Write(binary.BigEndian.AppendUint32(nil, uint32(n)))
}

// appendMsgpackStr encodes s in the shortest of fixstr, str8, str16 and
// str32, as the library's encoder does.
func appendMsgpackStr(b *bytes.Buffer, s string) {
	switch n := len(s); {
	case n < 32:
		b.WriteByte(0xa0 | byte(n))
	case n < 1<<8:
		b.Write([]byte{0xd9, byte(n)})
	case n < 1<<16:
		b.Write([]byte{0xda, byte(n >> 8), byte(n)})
	default:
		b.WriteByte(0xdb)
		b.Write(binary.BigEndian.AppendUint32(nil, uint32(n)))
	}
	b.WriteString(s)
}

func msgpackKindName(kind uint8) string {
	switch kind {
	case msgpackKindRequest:
		return "request"
	case msgpackKindNotification:
		return "notification"
	case msgpackKindResult:
		return "result"
	case msgpackKindError:
		return "error"
	}
	return "message"
}

func encodeMsgpackBody(enc *msgpack.Encoder, kind uint8, id ID, method string, payload any) error {
	if err := enc.EncodeArrayLen(msgpackBodyLen); err != nil {
		return err
	}
	if err := enc.EncodeUint(uint64(kind)); err != nil {
		return err
	}
	var err error
	switch {
	case kind == msgpackKindNotification:
		err = enc.EncodeNil()
	case id.IsStr:
		err = enc.EncodeString(id.Str)
	default:
		err = enc.EncodeInt(id.Num)
	}
	if err != nil {
		return err
	}
	if err := enc.EncodeString(method); err != nil {
		return err
	}
	return enc.Encode(payload)
}

// AppendFrame appends the frame carrying body (a length header, then
// body) to dst. The caller keeps body within the peer's frame limit.
func AppendFrame(dst []byte, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...)
}

// ReadFrame reads one frame from r and returns its body, in buf when it
// fits (the body is then valid until buf is reused) and in new memory
// otherwise. maxFrame <= 0 means protocol.MaxMessageBytes.
//
// An empty frame, and a frame over maxFrame, whose body is discarded
// without being buffered, return a *MalformedError (wrapping
// ErrMessageTooLarge for the latter): r is positioned at the next frame.
// io.EOF means r ended before the frame; io.ErrUnexpectedEOF that it
// ended inside it.
func ReadFrame(r io.Reader, buf []byte, maxFrame int) ([]byte, error) {
	var hdr []byte
	if cap(buf) >= msgpackHeaderLen {
		hdr = buf[:msgpackHeaderLen]
	} else {
		hdr = make([]byte, msgpackHeaderLen)
	}
	return readMsgpackFrame(r, hdr, buf, msgpackFrameLimit(maxFrame))
}

// readMsgpackFrame reads the header into hdr (len 4, may share buf's memory) and
// the body into buf or new memory.
func readMsgpackFrame(r io.Reader, hdr []byte, buf []byte, maxFrame int) ([]byte, error) {
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err // io.EOF before the first byte, io.ErrUnexpectedEOF after
	}
	n := int64(binary.BigEndian.Uint32(hdr))
	if n == 0 {
		return nil, &MalformedError{Err: errors.New("msgpack frame of length 0")}
	}
	if n > int64(maxFrame) {
		if _, err := io.CopyN(io.Discard, r, n); err != nil {
			return nil, msgpackNoEOF(err)
		}
		return nil, &MalformedError{Err: fmt.Errorf("msgpack frame of %d bytes: %w (limit %d bytes)", n, ErrMessageTooLarge, maxFrame)}
	}
	return readMsgpackBody(r, buf, int(n))
}

// readMsgpackBody reads n bytes into buf, or into memory grown with the bytes
// actually received: a peer announcing a large frame and then stalling
// does not get it allocated up front.
func readMsgpackBody(r io.Reader, buf []byte, n int) ([]byte, error) {
	if n <= cap(buf) {
		b := buf[:n]
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, msgpackNoEOF(err)
		}
		return b, nil
	}
	var fb frameBuffer
	if err := fillFrame(r, &fb, n); err != nil {
		return nil, err
	}
	return fb.b, nil
}

// fillFrame reads an n-byte body into fb, growing it as frameGrowth says
// (up front at most FreeFrameBytes, then at most 4× what has arrived),
// each step filled before the next is allocated. On an error fb holds
// what had arrived.
func fillFrame(r io.Reader, fb *frameBuffer, n int) error {
	for len(fb.b) < n {
		if err := fb.grow(len(fb.b)+1, n); err != nil {
			return err
		}
		have := len(fb.b)
		k, err := io.ReadFull(r, fb.b[have:cap(fb.b)])
		fb.b = fb.b[:have+k]
		if err != nil {
			return msgpackNoEOF(err)
		}
	}
	return nil
}

// msgpackPrefixID reads the id of a request from the first bytes of its
// body (a frame dropped part way); ok is false when they are not the
// start of a request with an id.
func msgpackPrefixID(p []byte) (id ID, ok bool) {
	size, elems, err := mpHead(p)
	if err != nil || !mpIsArray(p[0]) || elems != msgpackBodyLen {
		return ID{}, false
	}
	pos := size
	for i := 0; i < 2; i++ { // kind, then id: scalars or strings, wholly present
		n, elems, err := mpHead(p[pos:])
		if err != nil || elems != 0 {
			return ID{}, false
		}
		switch {
		case i == 0:
			kind, _, isInt := mpInt(p, pos)
			if !isInt || kind != msgpackKindRequest {
				return ID{}, false
			}
		case mpIsStr(p[pos]):
			s, _ := mpStr(p, pos)
			return ID{Str: string(s), IsStr: true}, true
		default:
			num, _, isInt := mpInt(p, pos)
			return ID{Num: num}, isInt
		}
		pos += n
	}
	return ID{}, false
}

// msgpackNoEOF turns an EOF inside a frame into io.ErrUnexpectedEOF.
func msgpackNoEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// DecodeMsgpackMessage decodes one frame body. The message's params alias
// body, which must not change while they are in use; values they decode
// into do not alias it.
func DecodeMsgpackMessage(body []byte) (*Message, error) {
	budget := msgpackMaxValues
	end, err := scanMsgpack(body, &budget)
	if err != nil {
		return nil, err
	}
	if end != len(body) {
		return nil, fmt.Errorf("%d bytes after the message", len(body)-end)
	}
	// body is now one complete, bounded msgpack value; the reads below
	// cannot run past its end.
	n, pos, ok := mpArrayLen(body, 0)
	if !ok || n != msgpackBodyLen {
		return nil, fmt.Errorf("message is not an array of %d elements", msgpackBodyLen)
	}
	kind, pos, ok := mpInt(body, pos)
	if !ok || kind < msgpackKindRequest || kind > msgpackKindError {
		return nil, errors.New("message kind is not 1, 2, 3 or 4")
	}
	m := &Message{}
	hasID := true
	switch c := body[pos]; {
	case c == 0xc0:
		hasID = false
		pos++
	case mpIsStr(c):
		var s []byte
		s, pos = mpStr(body, pos)
		m.ID = ID{Str: string(s), IsStr: true}
	default:
		var num int64
		if num, pos, ok = mpInt(body, pos); !ok {
			return nil, errors.New("id must be an int64, a string or nil")
		}
		m.ID = ID{Num: num}
	}
	if !mpIsStr(body[pos]) {
		return nil, errors.New("method must be a string")
	}
	method, pos := mpStr(body, pos)
	payload := msgpackParams(body[pos:])
	if len(payload) == 1 && payload[0] == 0xc0 {
		payload = nil
	}
	switch kind {
	case msgpackKindRequest, msgpackKindNotification:
		if len(method) == 0 {
			return nil, errors.New("method must not be empty")
		}
		if hasID != (kind == msgpackKindRequest) {
			return nil, errors.New("a request needs an id and a notification has none")
		}
		m.Method = string(method)
		m.Params = payload
		if hasID {
			m.Kind = KindRequest
		} else {
			m.Kind = KindNotification
		}
	default:
		if len(method) != 0 {
			return nil, errors.New("a response has no method")
		}
		if !hasID {
			return nil, errors.New("a response needs an id")
		}
		m.Kind = KindResponse
		m.Result = payload
		if kind == msgpackKindError {
			if payload.Absent() || !mpIsMap(payload[0]) {
				return nil, errors.New("error object must be a map")
			}
			m.Result = msgpackParams(nil)
			if m.Error, err = decodeMsgpackError(payload); err != nil {
				return nil, fmt.Errorf("error object: %w", err)
			}
		}
	}
	return m, nil
}

// decodeMsgpackError decodes an error object. data is free-form: when it
// is valid msgpack that does not decode into an any (a map with integer
// keys, say) it is kept as a msgpack.RawMessage rather than costing the
// caller the response.
func decodeMsgpackError(p msgpackParams) (*protocol.Error, error) {
	var obj struct {
		Code    int                `msgpack:"code"`
		Message string             `msgpack:"message"`
		Data    msgpack.RawMessage `msgpack:"data"`
	}
	if err := p.Decode(&obj); err != nil {
		return nil, err
	}
	e := &protocol.Error{Code: obj.Code, Message: obj.Message}
	if len(obj.Data) > 0 {
		if err := msgpackParams(obj.Data).Decode(&e.Data); err != nil {
			e.Data = obj.Data
		}
	}
	return e, nil
}

// msgpackParams is one validated msgpack value (DecodeMsgpackMessage
// makes them), or empty when absent.
type msgpackParams []byte

func (p msgpackParams) Absent() bool { return len(p) == 0 }

func (p msgpackParams) Decode(v any) (err error) {
	if p.Absent() {
		return nil
	}
	switch out := v.(type) {
	case *protocol.OutputNotification:
		if decodeOutputMsgpack(p, out) {
			return nil
		}
	case *protocol.FsReadBlockResult:
		if decodeReadBlockMsgpack(p, out) {
			return nil
		}
	case *protocol.FsWriteBlockParams:
		if decodeWriteBlockMsgpack(p, out) {
			return nil
		}
	}
	// Not msgpack.Unmarshal: it turns on UsePreallocateValues, which
	// starts a goroutine per decoded pointer type that never ends.
	dec := msgpack.GetDecoder()
	defer func() {
		// The peer chose these bytes. The library panics on some of them
		// (an array or bin used as a key of a map[any]any): that is a bad
		// message, not a reason to take the process down.
		if r := recover(); r != nil {
			err = fmt.Errorf("msgpack: decoding %T: %v", v, r)
			return
		}
		msgpack.PutDecoder(dec)
	}()
	dec.Reset(bytes.NewReader(p))
	return dec.Decode(v)
}

// EncodeMsgpack writes the params verbatim, so a message's params can be
// passed on as another message's payload.
func (p msgpackParams) EncodeMsgpack(enc *msgpack.Encoder) error {
	if p.Absent() {
		return enc.EncodeNil()
	}
	return msgpack.RawMessage(p).EncodeMsgpack(enc)
}

// errMsgpackTruncated is deliberately not io.ErrUnexpectedEOF, which
// means a broken stream rather than a malformed message.
var errMsgpackTruncated = errors.New("msgpack value runs past the end of the message")

// scanMsgpack validates the one msgpack value at the start of b and
// returns its length. It iterates rather than recurses, and every element
// an array or map declares must have at least a byte left for it, so it
// runs in time linear in len(b). budget is decremented for every value.
func scanMsgpack(b []byte, budget *int) (int, error) {
	var stackBuf [16]uint64
	stack := stackBuf[:0] // elements still due in each open array or map
	pos := 0
	for {
		if *budget <= 0 {
			return 0, fmt.Errorf("message has more than %d msgpack values", msgpackMaxValues)
		}
		*budget--
		size, elems, err := mpHead(b[pos:])
		if err != nil {
			return 0, err
		}
		pos += size
		if elems > 0 {
			if elems > uint64(len(b)-pos) {
				return 0, errMsgpackTruncated
			}
			if len(stack) == msgpackMaxDepth {
				return 0, fmt.Errorf("message nests deeper than %d", msgpackMaxDepth)
			}
			stack = append(stack, elems)
			continue
		}
		for len(stack) > 0 { // a value ended: count it off its containers
			stack[len(stack)-1]--
			if stack[len(stack)-1] > 0 {
				break
			}
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			return pos, nil
		}
	}
}

// mpHead measures the value starting at b: size is the bytes of its
// header and, for scalars, strings and bins, its content; elems is the
// number of values an array or map holds (a map's keys and values).
func mpHead(b []byte) (size int, elems uint64, err error) {
	if len(b) == 0 {
		return 0, 0, errMsgpackTruncated
	}
	c := b[0]
	fixed := func(n int) (int, uint64, error) {
		if len(b) < n {
			return 0, 0, errMsgpackTruncated
		}
		return n, 0, nil
	}
	// sized reads a big-endian length of w bytes after the code.
	sized := func(w int) (uint64, error) {
		if len(b) < 1+w {
			return 0, errMsgpackTruncated
		}
		var n uint64
		for _, x := range b[1 : 1+w] {
			n = n<<8 | uint64(x)
		}
		return n, nil
	}
	blob := func(hdr int, n uint64) (int, uint64, error) {
		if n > uint64(len(b)-hdr) {
			return 0, 0, errMsgpackTruncated
		}
		return hdr + int(n), 0, nil
	}
	switch {
	case c <= 0x7f || c >= 0xe0: // fixint
		return 1, 0, nil
	case c <= 0x8f: // fixmap
		return 1, 2 * uint64(c&0x0f), nil
	case c <= 0x9f: // fixarray
		return 1, uint64(c & 0x0f), nil
	case c <= 0xbf: // fixstr
		return blob(1, uint64(c&0x1f))
	}
	switch c {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return 1, 0, nil
	case 0xcc, 0xd0: // uint8, int8
		return fixed(2)
	case 0xcd, 0xd1: // uint16, int16
		return fixed(3)
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return fixed(5)
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		return fixed(9)
	case 0xc4, 0xd9: // bin8, str8
		n, err := sized(1)
		if err != nil {
			return 0, 0, err
		}
		return blob(2, n)
	case 0xc5, 0xda: // bin16, str16
		n, err := sized(2)
		if err != nil {
			return 0, 0, err
		}
		return blob(3, n)
	case 0xc6, 0xdb: // bin32, str32
		n, err := sized(4)
		if err != nil {
			return 0, 0, err
		}
		return blob(5, n)
	case 0xdc, 0xde: // array16, map16
		n, err := sized(2)
		if err != nil {
			return 0, 0, err
		}
		if c == 0xde {
			n *= 2
		}
		return 3, n, nil
	case 0xdd, 0xdf: // array32, map32
		n, err := sized(4)
		if err != nil {
			return 0, 0, err
		}
		if c == 0xdf {
			n *= 2
		}
		return 5, n, nil
	}
	if c == 0xc1 {
		return 0, 0, errors.New("msgpack code 0xc1 is never used")
	}
	return 0, 0, fmt.Errorf("msgpack extension type (code %#x) is not allowed", c)
}

// The helpers below read values that scanMsgpack has already validated.

func mpIsStr(c byte) bool   { return c >= 0xa0 && c <= 0xbf || c >= 0xd9 && c <= 0xdb }
func mpIsMap(c byte) bool   { return c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf }
func mpIsArray(c byte) bool { return c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd }

// mpArrayLen reads an array header.
func mpArrayLen(b []byte, pos int) (n uint64, next int, ok bool) {
	switch c := b[pos]; {
	case c >= 0x90 && c <= 0x9f:
		return uint64(c & 0x0f), pos + 1, true
	case c == 0xdc:
		return uint64(binary.BigEndian.Uint16(b[pos+1:])), pos + 3, true
	case c == 0xdd:
		return uint64(binary.BigEndian.Uint32(b[pos+1:])), pos + 5, true
	}
	return 0, pos, false
}

// mpInt reads an integer of any width that fits in an int64.
func mpInt(b []byte, pos int) (n int64, next int, ok bool) {
	switch c := b[pos]; {
	case c <= 0x7f || c >= 0xe0:
		return int64(int8(c)), pos + 1, true
	case c == 0xcc:
		return int64(b[pos+1]), pos + 2, true
	case c == 0xcd:
		return int64(binary.BigEndian.Uint16(b[pos+1:])), pos + 3, true
	case c == 0xce:
		return int64(binary.BigEndian.Uint32(b[pos+1:])), pos + 5, true
	case c == 0xcf:
		u := binary.BigEndian.Uint64(b[pos+1:])
		return int64(u), pos + 9, u <= math.MaxInt64
	case c == 0xd0:
		return int64(int8(b[pos+1])), pos + 2, true
	case c == 0xd1:
		return int64(int16(binary.BigEndian.Uint16(b[pos+1:]))), pos + 3, true
	case c == 0xd2:
		return int64(int32(binary.BigEndian.Uint32(b[pos+1:]))), pos + 5, true
	case c == 0xd3:
		return int64(binary.BigEndian.Uint64(b[pos+1:])), pos + 9, true
	}
	return 0, pos, false
}

// mpStr reads a string whose code mpIsStr accepted.
func mpStr(b []byte, pos int) (s []byte, next int) {
	var n, hdr int
	switch c := b[pos]; c {
	case 0xd9:
		n, hdr = int(b[pos+1]), 2
	case 0xda:
		n, hdr = int(binary.BigEndian.Uint16(b[pos+1:])), 3
	case 0xdb:
		n, hdr = int(binary.BigEndian.Uint32(b[pos+1:])), 5
	default:
		n, hdr = int(c&0x1f), 1
	}
	start := pos + hdr
	return b[start : start+n], start + n
}

var _ MessageConn = (*MsgpackConn)(nil)
