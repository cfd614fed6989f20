package executor

import (
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/remotefs"
	"github.com/outpost-exec/outpost/transport"
)

// codex/call (protocol/codex.go): a codex request carried as JSON on the
// native transport, served by the same method table as the ws front end.

// unwrapCodexCall turns a codex/call into the request it carries, with
// params decoded as the JSON codec decodes them. Only the native transport
// needs it; initialize and codex/call itself cannot be wrapped, so a
// session is always opened natively and nothing nests.
func (c *serverConn) unwrapCodexCall(m *transport.Message) (*transport.Message, *protocol.Error) {
	if c.streams == nil {
		return nil, protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeMethodNotFound,
			"method `%s` is not implemented by this executor", m.Method)
	}
	var p protocol.CodexCallParams
	if err := decode(m, &p, true); err != nil {
		var pe *protocol.Error
		if e, ok := err.(*protocol.Error); ok {
			pe = e
		} else {
			pe = protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: %v", m.Method, err)
		}
		return nil, pe
	}
	switch p.Method {
	case "":
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: method is required", m.Method)
	case protocol.MethodInitialize, protocol.MethodCodexCall:
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "%s cannot carry %s", m.Method, p.Method)
	}
	if len(p.Params) > 0 {
		if err := transport.CheckJSON(p.Params, protocol.MaxJSONValues); err != nil {
			return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: %v", p.Method, err)
		}
	}
	return &transport.Message{Kind: transport.KindRequest, ID: m.ID, Method: p.Method, Params: transport.JSONParams(p.Params)}, nil
}

// codexResult encodes a wrapped request's result as the ws front end
// would send it.
func codexResult(method string, res any) (any, error) {
	raw, err := transport.MarshalJSON(res)
	remotefs.ReleaseBlock(res) // copied into raw: its buffer is free
	if err != nil {
		return nil, protocol.KindErrorf(protocol.KindInternal, protocol.CodeInternal, "%s: the result cannot be encoded: %v", method, err)
	}
	return protocol.CodexCallResult{Result: raw}, nil
}
