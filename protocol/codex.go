package protocol

// codex's methods on the native transport.
//
// The native transport (msgpack on mux streams) carries outpost's core
// methods — initialize, process/*, fs/* — as typed msgpack. Every other
// method codex's protocol has (fs/walk, http/request, environmentConfig/read,
// …) and every method codex gains later travels inside codex/call as the
// very JSON codex wrote: the executor decodes it with its JSON codec and
// answers with the JSON its ws front end would send. So a front end that
// relays codex's protocol over the native transport (outpost bridge)
// forwards a method it has never heard of without knowing its shape — base64
// stays base64, numbers stay exact — and needs no change when the executor
// gains one.
//
//	request       codex/call          {method, params: bin(JSON) | nil}
//	result                            {result: bin(JSON)}
//	notification  codex/notification  {method, params: bin(JSON)}
//
// An error comes back as the inner method's error, unchanged. The
// executor sends codex/notification, on the native transport only, for
// every notification that is not a process event (fs/missingChanged,
// http/request/bodyDelta, …); on ws and stdio it sends the notification
// itself. initialize and codex/call cannot be wrapped.
const (
	MethodCodexCall         = "codex/call"
	MethodCodexNotification = "codex/notification"
)

// CodexCallParams wrap one codex request.
type CodexCallParams struct {
	Method string `json:"method" msgpack:"method"`
	// Params is the request's params as JSON; nil when absent.
	Params []byte `json:"params,omitempty" msgpack:"params,omitempty"`
}

// CodexCallResult is the wrapped request's result as JSON.
type CodexCallResult struct {
	Result []byte `json:"result" msgpack:"result"`
}

// CodexNotification wraps one codex notification.
type CodexNotification struct {
	Method string `json:"method" msgpack:"method"`
	Params []byte `json:"params,omitempty" msgpack:"params,omitempty"`
}
