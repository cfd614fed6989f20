package executor_test

import (
	"testing"

	"github.com/outpost-exec/outpost/executor"
)

func TestParseListenURLAcceptsIPLiteralsAndStdio(t *testing.T) {
	cases := []struct {
		in   string
		want executor.ListenURL
	}{
		{"ws://127.0.0.1:0", executor.ListenURL{Scheme: "ws", Addr: "127.0.0.1:0"}},
		{"ws://127.0.0.1:8080", executor.ListenURL{Scheme: "ws", Addr: "127.0.0.1:8080"}},
		{"ws://0.0.0.0:65535", executor.ListenURL{Scheme: "ws", Addr: "0.0.0.0:65535"}},
		{"ws://[::1]:8080", executor.ListenURL{Scheme: "ws", Addr: "[::1]:8080"}},
		{"ws://[::]:0", executor.ListenURL{Scheme: "ws", Addr: "[::]:0"}},
		{"ws://[0:0:0:0:0:0:0:1]:1", executor.ListenURL{Scheme: "ws", Addr: "[::1]:1"}},
		{"stdio", executor.ListenURL{Scheme: "stdio"}},
		{"stdio://", executor.ListenURL{Scheme: "stdio"}},
		{executor.DefaultListenURL, executor.ListenURL{Scheme: "ws", Addr: "127.0.0.1:0"}},
	}
	for _, c := range cases {
		got, err := executor.ParseListenURL(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseListenURL(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestParseListenURLErrorMessagesMatchCodex(t *testing.T) {
	cases := []struct {
		in, want string
	}{
		{"ws://localhost:1234", "invalid websocket --listen URL `ws://localhost:1234`; expected `ws://IP:PORT`"},
		{"http://x", "unsupported --listen URL `http://x`; expected `ws://IP:PORT` or `stdio`"},
	}
	for _, c := range cases {
		got, err := executor.ParseListenURL(c.in)
		if err == nil {
			t.Errorf("ParseListenURL(%q) = %+v, want an error", c.in, got)
			continue
		}
		if err.Error() != c.want {
			t.Errorf("ParseListenURL(%q) error\n\t%s\nwant\n\t%s", c.in, err, c.want)
		}
	}
}

func TestParseListenURLRejectsHostnamesAndOtherSchemes(t *testing.T) {
	invalidWS := []string{
		"ws://localhost:1234",
		"ws://127.0.0.1",
		"ws://127.0.0.1:",
		"ws://:8080",
		"ws://127.0.0.1:65536",
		"ws://127.0.0.1:-1",
		"ws://127.0.0.1:80/",
		"ws://127.0.0.1:80/path",
		"ws://::1:8080",
		"ws://[::1]",
		"ws://user@127.0.0.1:80",
		"ws://",
	}
	for _, in := range invalidWS {
		_, err := executor.ParseListenURL(in)
		if want := "invalid websocket --listen URL `" + in + "`; expected `ws://IP:PORT`"; err == nil || err.Error() != want {
			t.Errorf("ParseListenURL(%q): err = %v, want %q", in, err, want)
		}
	}
	unsupported := []string{
		"http://x",
		"",
		"wss://127.0.0.1:443",
		"WS://127.0.0.1:80",
		"127.0.0.1:80",
		"stdio:",
		"stdio:///",
		"STDIO",
		"unix:///tmp/sock",
	}
	for _, in := range unsupported {
		_, err := executor.ParseListenURL(in)
		if want := "unsupported --listen URL `" + in + "`; expected `ws://IP:PORT` or `stdio`"; err == nil || err.Error() != want {
			t.Errorf("ParseListenURL(%q): err = %v, want %q", in, err, want)
		}
	}
}
