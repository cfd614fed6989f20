package relay

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestRevokeExecutorUnbindsEveryIDOfTheKeyAndRevokesItForGood(t *testing.T) {
	s, p := newTestStore(t)
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s.now = clock.Now
	var k1, k2, k3 [32]byte
	k1[0], k2[0], k3[0] = 1, 2, 3
	for id, k := range map[string][32]byte{"a": k1, "b": k1, "c": k2} {
		if err := s.BindExecutor(id, k); err != nil {
			t.Fatal(err)
		}
	}
	if seq, err := s.RevocationSeq(); err != nil || seq != 0 {
		t.Fatalf("seq before = %d %v", seq, err)
	}
	if _, err := s.RevokeExecutor("nobody"); !errors.Is(err, ErrExecutorUnknown) {
		t.Fatalf("revoke unknown = %v, want ErrExecutorUnknown", err)
	}
	rev, err := s.RevokeExecutor("a")
	if err != nil {
		t.Fatal(err)
	}
	if rev.Key != k1 || !slices.Equal(rev.IDs, []string{"a", "b"}) || rev.Seq != 1 || !rev.RevokedAt.Equal(clock.Now()) {
		t.Fatalf("revocation %+v", rev)
	}
	for _, id := range []string{"a", "b"} {
		if _, ok, err := s.ExecutorKey(id); err != nil || ok {
			t.Fatalf("%s still bound (%v)", id, err)
		}
	}
	if k, ok, _ := s.ExecutorKey("c"); !ok || k != k2 {
		t.Fatal("another key's binding was touched")
	}
	// The key can never be bound again, under any id.
	for _, id := range []string{"a", "b", "new"} {
		if err := s.BindExecutor(id, k1); !errors.Is(err, ErrKeyRevoked) {
			t.Fatalf("bind revoked key as %s = %v, want ErrKeyRevoked", id, err)
		}
	}
	// The id is free for a new key.
	if err := s.BindExecutor("a", k3); err != nil {
		t.Fatal(err)
	}
	st, err := s.CheckExecutor("a", k1)
	if err != nil || !st.KeyRevoked || !st.Bound || st.BoundKey != k3 || st.Seq != 1 {
		t.Fatalf("CheckExecutor(a, k1) = %+v %v", st, err)
	}
	if st, _ := s.CheckExecutor("a", k3); st.KeyRevoked || !st.Bound {
		t.Fatalf("CheckExecutor(a, k3) = %+v", st)
	}
	if st, _ := s.CheckExecutor("zzz", k2); st.KeyRevoked || st.Bound {
		t.Fatalf("CheckExecutor(zzz, k2) = %+v", st)
	}
	// Revoking an already revoked id (no binding) is an error, and moves
	// nothing.
	if _, err := s.RevokeExecutor("b"); !errors.Is(err, ErrExecutorUnknown) {
		t.Fatalf("revoke b again = %v", err)
	}

	// Everything persists, and another Store on the file sees it.
	s2, err := OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	if rev, err := s2.RevokeExecutor("c"); err != nil || rev.Seq != 2 {
		t.Fatalf("second revocation %+v %v", rev, err)
	}
	revoked, seq, err := s.RevokedKeys([][32]byte{k1, k2, k3})
	if err != nil || seq != 2 || !revoked[k1] || !revoked[k2] || revoked[k3] {
		t.Fatalf("RevokedKeys = %v %d %v", revoked, seq, err)
	}
}
