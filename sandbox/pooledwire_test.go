package sandbox

import (
	"reflect"
	"testing"
)

func TestPooledWireRoundTrip(t *testing.T) {
	r := pooledRequest{
		Spec: spec{Network: true, ReadOnly: []string{"/a", ""}, ReadWrite: []string{"/b"}, None: []string{"/c/ü"}, Protected: []string{"/d/.git"},
			FullWrite: false, Arg0: "sh", Limits: Limits{OpenFiles: 1, FileSize: 1 << 40, Processes: 7}, MountNamespace: true,
			Dir: "/w", Mounts: []mountSpec{{Path: "/w", FD: 3}, {Path: "/r", ReadOnly: true}}, DenySetID: true},
		Argv: []string{HelperName, "--", "/bin/sh", "-c", "echo hi"}, Env: []string{"A=b", "PATH=/bin"}, Tty: true, Files: 4,
	}
	got, err := decodePooledRequest(r.encode(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
	}
	// Every proper prefix is refused, never half-read.
	b := r.encode(nil)
	for n := range len(b) {
		if _, err := decodePooledRequest(b[:n]); err == nil {
			t.Fatalf("a request cut to %d of %d bytes was accepted", n, len(b))
		}
	}
	if _, err := decodePooledRequest(append(b, 0)); err == nil {
		t.Fatal("trailing bytes accepted")
	}
}

func FuzzPooledWire(f *testing.F) {
	f.Add(pooledRequest{Argv: []string{"a"}, Env: []string{"B=c"}, Files: 3}.encode(nil))
	f.Add([]byte{pooledWireVersion, 0xff, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodePooledRequest(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same request.
		again, err := decodePooledRequest(r.encode(nil))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("re-encoding %+v: %+v %v", r, again, err)
		}
	})
}
