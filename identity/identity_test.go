package identity

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flynn/noise"
)

func mustGenerate(t testing.TB) Key {
	t.Helper()
	k, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writeFile(t testing.TB, path, data string, perm fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // not subject to umask
		t.Fatal(err)
	}
}

func wantErrContaining(t testing.TB, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want one containing %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

// ---- keys and fingerprints ----

func TestFingerprintRoundTripsThroughParse(t *testing.T) {
	k := mustGenerate(t)
	pub := k.PublicKey()
	fp := pub.Fingerprint()
	if len(fp) != FingerprintLen {
		t.Fatalf("fingerprint %q has %d chars, want %d", fp, len(fp), FingerprintLen)
	}
	if strings.ContainsAny(fp, "+/=") {
		t.Fatalf("fingerprint %q is not unpadded base64url", fp)
	}
	if pub.String() != fp {
		t.Fatalf("String() = %q, want the fingerprint %q", pub.String(), fp)
	}
	for _, s := range []string{
		fp,
		"  " + fp + "\n",
		base64.StdEncoding.EncodeToString(pub[:]),
		base64.RawStdEncoding.EncodeToString(pub[:]),
		base64.URLEncoding.EncodeToString(pub[:]),
	} {
		got, err := ParsePublicKey(s)
		if err != nil {
			t.Fatalf("ParsePublicKey(%q): %v", s, err)
		}
		if got != pub {
			t.Fatalf("ParsePublicKey(%q) = %v, want %v", s, got, pub)
		}
	}
	var viaText PublicKey
	text, _ := pub.MarshalText()
	if err := viaText.UnmarshalText(text); err != nil || viaText != pub {
		t.Fatalf("text round trip: %v, %v", viaText, err)
	}
}

func TestFingerprintsOfDistinctKeysDiffer(t *testing.T) {
	a, b := mustGenerate(t), mustGenerate(t)
	if a.PublicKey().Fingerprint() == b.PublicKey().Fingerprint() {
		t.Fatal("two generated keys have the same fingerprint")
	}
}

func TestDerivedPublicKeyAgreesWithNoiseDH(t *testing.T) {
	a, b := mustGenerate(t), mustGenerate(t)
	d, err := KeyFromPrivate(a.Private)
	if err != nil {
		t.Fatal(err)
	}
	if d != a {
		t.Fatalf("KeyFromPrivate derived %v, Generate gave %v", d, a)
	}
	ab, err := noise.DH25519.DH(a.Keypair().Private, b.Keypair().Public)
	if err != nil {
		t.Fatal(err)
	}
	ba, err := noise.DH25519.DH(b.Keypair().Private, a.Keypair().Public)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ab, ba) {
		t.Fatal("DH(a, B) != DH(b, A): derived public keys are wrong")
	}
}

func TestKeypairDoesNotAliasKey(t *testing.T) {
	k := mustGenerate(t)
	orig := k
	kp := k.Keypair()
	kp.Private[0] ^= 0xff
	kp.Public[0] ^= 0xff
	if k != orig {
		t.Fatal("mutating Keypair() slices changed the Key")
	}
}

func TestKeyFormattingDoesNotLeakPrivateKey(t *testing.T) {
	k := mustGenerate(t)
	secrets := []string{
		base64.StdEncoding.EncodeToString(k.Private[:]),
		base64.RawURLEncoding.EncodeToString(k.Private[:]),
		fmt.Sprint(k.Private[:4]),
		fmt.Sprintf("%x", k.Private[:4]),
		fmt.Sprintf("%d", k.Private[0]) + " " + fmt.Sprintf("%d", k.Private[1]),
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(verb, k)
		if !strings.Contains(out, k.PublicKey().Fingerprint()) {
			t.Errorf("%s of Key = %q, want the fingerprint in it", verb, out)
		}
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s of Key = %q leaks private key material %q", verb, out, s)
			}
		}
	}
}

func TestParsePublicKeyRejectsWrongLength(t *testing.T) {
	pub := mustGenerate(t).PublicKey()
	fp := pub.Fingerprint()
	for _, tc := range []struct {
		in   string
		want string
	}{
		{fp[:42], "42 characters"},
		{fp + "A", "44 characters"},
		{fp[:22], "22 characters"},
		{fp + fp, "86 characters"},
		{base64.RawURLEncoding.EncodeToString(make([]byte, 16)), "22 characters"},
		{base64.RawURLEncoding.EncodeToString(append(pub[:], 1)), "44 characters"},
	} {
		_, err := ParsePublicKey(tc.in)
		wantErrContaining(t, err, tc.want, "want 43")
	}
}

func TestParsePublicKeyRejectsBadBase64(t *testing.T) {
	pub := mustGenerate(t).PublicKey()
	fp := pub.Fingerprint()
	// The last character carries 2 unused bits; strict decoding must
	// refuse a non-zero one so that each key has one spelling.
	last := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", fp[42])
	nonCanonical := fp[:42] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last|1])
	for _, in := range []string{
		strings.Repeat("!", 43),
		fp[:20] + "*" + fp[21:],
		fp[:20] + "\n" + fp[21:],
		fp[:42] + "=",
		fp[:41] + "==",
		nonCanonical,
		"+" + fp[1:42] + "_", // mixed alphabets
	} {
		if _, err := ParsePublicKey(in); err == nil {
			t.Errorf("ParsePublicKey(%q) accepted bad base64", in)
		}
	}
}

func TestParsePublicKeyRejectsEmpty(t *testing.T) {
	for _, in := range []string{"", "   ", "\n"} {
		_, err := ParsePublicKey(in)
		wantErrContaining(t, err, "empty")
	}
}

func TestParsePublicKeyRejectsZeroKey(t *testing.T) {
	_, err := ParsePublicKey(PublicKey{}.Fingerprint())
	wantErrContaining(t, err, "all zeros")
}

// ---- key files ----

func TestKeyFileCreatedWith0600AndReloadsEqual(t *testing.T) {
	needModeBits(t)
	dir := filepath.Join(t.TempDir(), "state", "outpost")
	path := filepath.Join(dir, "key")
	k, created, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Fatal("created = false for a new key file")
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %04o, want 0600", fi.Mode().Perm())
	}
	di, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Fatalf("key directory mode %04o, want 0700", di.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	lines := strings.Split(string(data), "\n")
	if len(lines) != 3 || lines[0] != "outpost-x25519-private-key v1" || lines[2] != "" {
		t.Fatalf("key file contents %q not in the documented format", data)
	}
	if b, err := base64.StdEncoding.DecodeString(lines[1]); err != nil || !bytes.Equal(b, k.Private[:]) {
		t.Fatalf("second line %q is not the std base64 private key", lines[1])
	}

	again, created, err := LoadOrCreate(path)
	if err != nil || created || again != k {
		t.Fatalf("second LoadOrCreate = %v, created=%v, %v; want the same key, not created", again, created, err)
	}
	loaded, err := Load(path)
	if err != nil || loaded != k {
		t.Fatalf("Load = %v, %v; want %v", loaded, err, k)
	}
	assertNoTempFiles(t, dir, "key")
}

func assertNoTempFiles(t *testing.T, dir string, keep ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		found := false
		for _, k := range keep {
			found = found || e.Name() == k
		}
		if !found {
			t.Errorf("stray file %q left in %s", e.Name(), dir)
		}
	}
}

func TestLoadMissingKeyFileIsNotExistAndCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	_, err := Load(path)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of a missing file = %v, want fs.ErrNotExist", err)
	}
	wantErrContaining(t, err, path)
	assertNoTempFiles(t, dir)
}

func TestKeyFileWithGroupOrWorldAccessIsRefused(t *testing.T) {
	needModeBits(t)
	good := marshalKeyFile(mustGenerate(t))
	for _, perm := range []fs.FileMode{0o644, 0o640, 0o604, 0o660, 0o606, 0o700, 0o610} {
		path := filepath.Join(t.TempDir(), "key")
		writeFile(t, path, string(good), perm)
		_, err := Load(path)
		if !errors.Is(err, ErrInsecureKeyFile) {
			t.Fatalf("Load of a %04o key file = %v, want ErrInsecureKeyFile", perm, err)
		}
		wantErrContaining(t, err, path, "chmod 600", fmt.Sprintf("%04o", perm))
		// LoadOrCreate must neither accept nor replace it.
		if _, _, err := LoadOrCreate(path); !errors.Is(err, ErrInsecureKeyFile) {
			t.Fatalf("LoadOrCreate of a %04o key file = %v, want ErrInsecureKeyFile", perm, err)
		}
		if data, _ := os.ReadFile(path); !bytes.Equal(data, good) {
			t.Fatal("LoadOrCreate rewrote an insecure key file")
		}
	}
}

func TestKeyFileNarrowerThan0600IsAccepted(t *testing.T) {
	k := mustGenerate(t)
	path := filepath.Join(t.TempDir(), "key")
	writeFile(t, path, string(marshalKeyFile(k)), 0o400)
	got, err := Load(path)
	if err != nil || got != k {
		t.Fatalf("Load of a 0400 key file = %v, %v", got, err)
	}
}

func TestSymlinkedKeyFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real-key")
	writeFile(t, target, string(marshalKeyFile(mustGenerate(t))), 0o600)
	link := filepath.Join(dir, "key")
	if err := os.Symlink(target, link); err != nil {
		t.Skip("symlinks unsupported:", err)
	}
	_, err := Load(link)
	if !errors.Is(err, ErrInsecureKeyFile) {
		t.Fatalf("Load through a symlink = %v, want ErrInsecureKeyFile", err)
	}
	wantErrContaining(t, err, link, "symlink")
	if _, _, err := LoadOrCreate(link); !errors.Is(err, ErrInsecureKeyFile) {
		t.Fatalf("LoadOrCreate through a symlink = %v, want ErrInsecureKeyFile", err)
	}
}

func TestDanglingSymlinkKeyFileIsNotFollowedOnCreate(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	link := filepath.Join(dir, "key")
	if err := os.Symlink(target, link); err != nil {
		t.Skip("symlinks unsupported:", err)
	}
	if _, _, err := LoadOrCreate(link); !errors.Is(err, ErrInsecureKeyFile) {
		t.Fatalf("LoadOrCreate on a dangling symlink = %v, want ErrInsecureKeyFile", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("LoadOrCreate wrote a key through a dangling symlink")
	}
}

func TestKeyFileThatIsADirectoryIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadOrCreate(path)
	if !errors.Is(err, ErrInsecureKeyFile) {
		t.Fatalf("LoadOrCreate on a directory = %v, want ErrInsecureKeyFile", err)
	}
	wantErrContaining(t, err, "not a regular file")
}

func TestKeyFileOwnedByAnotherUserIsRefused(t *testing.T) {
	needModeBits(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown a file to another user")
	}
	path := filepath.Join(t.TempDir(), "key")
	writeFile(t, path, string(marshalKeyFile(mustGenerate(t))), 0o600)
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal("chown:", err)
	}
	_, err := Load(path)
	if !errors.Is(err, ErrInsecureKeyFile) {
		t.Fatalf("Load of another user's key file = %v, want ErrInsecureKeyFile", err)
	}
	wantErrContaining(t, err, path, "uid 65534")
}

func TestCorruptKeyFileErrorsWithPath(t *testing.T) {
	k := mustGenerate(t)
	b64 := base64.StdEncoding.EncodeToString(k.Private[:])
	for name, contents := range map[string]string{
		"empty":           "",
		"header only":     KeyFileHeader + "\n",
		"wrong header":    "ssh-ed25519 AAAA\n" + b64 + "\n",
		"future version":  "outpost-x25519-private-key v2\n" + b64 + "\n",
		"bad base64":      KeyFileHeader + "\n" + "not*base64\n",
		"url alphabet":    KeyFileHeader + "\n" + strings.NewReplacer("+", "-", "/", "_").Replace(b64) + "x\n",
		"short key":       KeyFileHeader + "\n" + base64.StdEncoding.EncodeToString(k.Private[:31]) + "\n",
		"long key":        KeyFileHeader + "\n" + base64.StdEncoding.EncodeToString(append(k.Private[:], 0)) + "\n",
		"extra line":      KeyFileHeader + "\n" + b64 + "\n" + b64 + "\n",
		"zero key":        KeyFileHeader + "\n" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n",
		"split key":       KeyFileHeader + "\n" + b64[:20] + "\r" + b64[20:] + "\n",
		"oversized":       KeyFileHeader + "\n" + b64 + "\n" + strings.Repeat("#", 5000),
		"binary garbage":  "\x00\x01\x02\xff",
		"blank then data": "\n" + KeyFileHeader + "\n" + b64 + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "key")
			writeFile(t, path, contents, 0o600)
			_, err := Load(path)
			if !errors.Is(err, ErrCorruptKeyFile) {
				t.Fatalf("Load = %v, want ErrCorruptKeyFile", err)
			}
			wantErrContaining(t, err, path)
			if _, _, err := LoadOrCreate(path); !errors.Is(err, ErrCorruptKeyFile) {
				t.Fatalf("LoadOrCreate = %v, want ErrCorruptKeyFile (and no overwrite)", err)
			}
			if data, _ := os.ReadFile(path); string(data) != contents {
				t.Fatal("LoadOrCreate overwrote a corrupt key file")
			}
		})
	}
}

func TestKeyFileToleratesCRLFAndMissingFinalNewline(t *testing.T) {
	k := mustGenerate(t)
	b64 := base64.StdEncoding.EncodeToString(k.Private[:])
	for _, contents := range []string{
		KeyFileHeader + "\n" + b64,
		KeyFileHeader + "\r\n" + b64 + "\r\n",
		KeyFileHeader + " \n" + b64 + " \n",
	} {
		path := filepath.Join(t.TempDir(), "key")
		writeFile(t, path, contents, 0o600)
		got, err := Load(path)
		if err != nil || got != k {
			t.Fatalf("Load(%q) = %v, %v", contents, got, err)
		}
	}
}

func TestConcurrentLoadOrCreateAllReturnTheSameKey(t *testing.T) {
	for round := 0; round < 20; round++ {
		dir := filepath.Join(t.TempDir(), "new")
		path := filepath.Join(dir, "key")
		const n = 8
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			keys    [n]Key
			created [n]bool
			errs    [n]error
		)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				keys[i], created[i], errs[i] = LoadOrCreate(path)
			}()
		}
		close(start)
		wg.Wait()
		nCreated := 0
		for i := 0; i < n; i++ {
			if errs[i] != nil {
				t.Fatalf("goroutine %d: %v", i, errs[i])
			}
			if keys[i] != keys[0] {
				t.Fatalf("goroutine %d got key %v, goroutine 0 got %v", i, keys[i], keys[0])
			}
			if created[i] {
				nCreated++
			}
		}
		if nCreated != 1 {
			t.Fatalf("%d callers report created=true, want exactly 1", nCreated)
		}
		if onDisk, err := Load(path); err != nil || onDisk != keys[0] {
			t.Fatalf("key on disk %v, %v; callers got %v", onDisk, err, keys[0])
		}
		assertNoTempFiles(t, dir, "key")
	}
}

// ---- default directories ----

func TestDefaultStateDirIsSystemDirForRoot(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/xdg/state")
	got := DefaultStateDir()
	if os.Geteuid() == 0 {
		if got != "/var/lib/outpost" {
			t.Fatalf("DefaultStateDir as root = %q, want /var/lib/outpost", got)
		}
	} else if got != "/xdg/state/outpost" {
		t.Fatalf("DefaultStateDir = %q, want /xdg/state/outpost", got)
	}
}

func TestUserDirsHonourXDGAndFallBackToHome(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	t.Setenv("XDG_STATE_HOME", "/xdg/state")
	t.Setenv("XDG_CONFIG_HOME", "/xdg/config")
	if got := xdgDir("XDG_STATE_HOME", ".local", "state"); got != "/xdg/state/outpost" {
		t.Errorf("state dir with XDG_STATE_HOME = %q", got)
	}
	if got := DefaultConfigDir(); got != "/xdg/config/outpost" {
		t.Errorf("DefaultConfigDir with XDG_CONFIG_HOME = %q", got)
	}
	for _, v := range []string{"", "relative/path"} { // the XDG spec ignores relative paths
		t.Setenv("XDG_STATE_HOME", v)
		t.Setenv("XDG_CONFIG_HOME", v)
		if got := xdgDir("XDG_STATE_HOME", ".local", "state"); got != "/home/u/.local/state/outpost" {
			t.Errorf("state dir with XDG_STATE_HOME=%q: %q", v, got)
		}
		want := "/home/u/.config/outpost"
		if nativeConfigDir != nil { // macOS, Windows: the platform's place
			base, err := nativeConfigDir()
			if err != nil {
				t.Fatal(err)
			}
			want = filepath.Join(base, "outpost")
		}
		if got := DefaultConfigDir(); got != want {
			t.Errorf("DefaultConfigDir with XDG_CONFIG_HOME=%q: %q, want %q", v, got, want)
		}
	}
}

// ---- allow-lists ----

func allowListFile(t *testing.T, contents string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "allowed_clients")
	writeFile(t, path, contents, 0o644)
	return path
}

func TestAllowListIgnoresCommentsAndBlankLines(t *testing.T) {
	a, b, c := mustGenerate(t).PublicKey(), mustGenerate(t).PublicKey(), mustGenerate(t).PublicKey()
	path := allowListFile(t, "# clients allowed to run commands\n"+
		"\n"+
		"   \t\n"+
		a.Fingerprint()+"\n"+
		"  "+b.Fingerprint()+"   alice's laptop # with spaces\r\n"+
		"\t# "+c.Fingerprint()+" commented out\n"+
		a.Fingerprint()+"\tduplicate\n"+
		b.Fingerprint()) // no final newline
	al, err := LoadAllowList(path)
	if err != nil {
		t.Fatal(err)
	}
	if al.Len() != 2 {
		t.Fatalf("Len = %d, want 2", al.Len())
	}
	if !al.Allowed(a) || !al.Allowed(b) {
		t.Fatal("listed key not allowed")
	}
	if al.Allowed(c) {
		t.Fatal("commented-out key allowed")
	}
	if al.Allowed(PublicKey{}) {
		t.Fatal("zero key allowed")
	}
	if got := al.Keys(); len(got) != 2 {
		t.Fatalf("Keys = %v", got)
	}
}

func TestAllowListBadLineErrorNamesFileAndLine(t *testing.T) {
	good := mustGenerate(t).PublicKey().Fingerprint()
	for _, tc := range []struct {
		contents string
		line     int
	}{
		{"# header\n\n" + good + "\nnot-a-key\n", 4},
		{good[:42] + " truncated\n", 1},
		{good + "\n" + good + "x\n", 2},
		{"#\n#\n" + strings.Repeat("A", 43) + "\n", 3}, // all zeros
	} {
		path := allowListFile(t, tc.contents)
		_, err := LoadAllowList(path)
		wantErrContaining(t, err, fmt.Sprintf("%s:%d:", path, tc.line))
	}
}

func TestEmptyAllowListAllowsNobody(t *testing.T) {
	al, err := LoadAllowList(allowListFile(t, "# nobody yet\n"))
	if err != nil {
		t.Fatal(err)
	}
	if al.Len() != 0 || al.Allowed(mustGenerate(t).PublicKey()) {
		t.Fatal("empty allow-list allows someone")
	}
}

func TestMissingAllowListIsAnError(t *testing.T) {
	_, err := LoadAllowList(filepath.Join(t.TempDir(), "nope"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadAllowList of a missing file = %v, want fs.ErrNotExist", err)
	}
}

func TestAllowListWritableByOthersIsRefused(t *testing.T) {
	needModeBits(t)
	path := allowListFile(t, mustGenerate(t).PublicKey().Fingerprint()+"\n")
	for _, perm := range []fs.FileMode{0o666, 0o620, 0o602} {
		if err := os.Chmod(path, perm); err != nil {
			t.Fatal(err)
		}
		_, err := LoadAllowList(path)
		wantErrContaining(t, err, path, "chmod go-w")
	}
}

func TestAllowListReloadPicksUpChanges(t *testing.T) {
	a, b := mustGenerate(t).PublicKey(), mustGenerate(t).PublicKey()
	path := allowListFile(t, a.Fingerprint()+"\n")
	al, err := LoadAllowList(path)
	if err != nil {
		t.Fatal(err)
	}
	if !al.Allowed(a) || al.Allowed(b) {
		t.Fatal("initial contents wrong")
	}
	writeFile(t, path, b.Fingerprint()+" new\n", 0o600)
	if err := al.Reload(); err != nil {
		t.Fatal(err)
	}
	if al.Allowed(a) || !al.Allowed(b) || al.Len() != 1 {
		t.Fatal("Reload did not replace the contents")
	}
}

func TestAllowListFailedReloadKeepsPreviousContents(t *testing.T) {
	a := mustGenerate(t).PublicKey()
	path := allowListFile(t, a.Fingerprint()+"\n")
	al, err := LoadAllowList(path)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, "garbage\n", 0o600)
	if err := al.Reload(); err == nil {
		t.Fatal("Reload accepted a malformed file")
	}
	if !al.Allowed(a) || al.Len() != 1 {
		t.Fatal("a failed Reload changed the allow-list")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := al.Reload(); err == nil || !al.Allowed(a) {
		t.Fatal("Reload of a deleted file emptied the allow-list or reported no error")
	}
}

func TestAllowListReadersNeverSeeAHalfReloadedList(t *testing.T) {
	// Two versions share key "always"; a reader checking it mid-reload
	// must never get false. Run under -race.
	always := mustGenerate(t).PublicKey()
	var others [2][]PublicKey
	var files [2]string
	for v := range files {
		var sb strings.Builder
		for i := 0; i < 50; i++ {
			k := mustGenerate(t).PublicKey()
			others[v] = append(others[v], k)
			sb.WriteString(k.Fingerprint() + "\n")
		}
		sb.WriteString(always.Fingerprint() + "\n")
		files[v] = sb.String()
	}
	path := allowListFile(t, files[0])
	al, err := LoadAllowList(path)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad sync.Map
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !al.Allowed(always) {
					bad.Store("always", true)
				}
				if n := al.Len(); n != 51 {
					bad.Store("len", n)
				}
			}
		}()
	}
	for i := 0; i < 200; i++ {
		writeFile(t, path, files[i%2], 0o600)
		if err := al.Reload(); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
	bad.Range(func(k, v any) bool {
		t.Errorf("reader saw a half-reloaded list: %v=%v", k, v)
		return true
	})
}

func TestNewAllowListHasNoFileToReload(t *testing.T) {
	k := mustGenerate(t).PublicKey()
	al := NewAllowList(k)
	if !al.Allowed(k) || al.Len() != 1 {
		t.Fatal("NewAllowList lost its key")
	}
	if err := al.Reload(); err == nil {
		t.Fatal("Reload of a file-less allow-list succeeded")
	}
	var zero AllowList
	if zero.Allowed(k) || zero.Len() != 0 {
		t.Fatal("zero AllowList allows someone")
	}
}

// ---- known executors ----

func knownPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "config", "outpost", "known_executors")
}

func TestKnownExecutorsTOFUPinThenCheckPasses(t *testing.T) {
	path := knownPath(t)
	ke, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatal(err)
	}
	const addr = "tcp://build-1.example:7000"
	key := mustGenerate(t).PublicKey()
	if err := ke.Check(addr, key); err != ErrNotPinned {
		t.Fatalf("Check before pinning = %v, want ErrNotPinned", err)
	}
	if err := ke.Pin(addr, key); err != nil {
		t.Fatal(err)
	}
	if err := ke.Check(addr, key); err != nil {
		t.Fatalf("Check of the pinned key = %v", err)
	}
	if got, ok := ke.Lookup(addr); !ok || got != key {
		t.Fatalf("Lookup = %v, %v", got, ok)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if modeBitsGuard && fi.Mode().Perm() != 0o600 {
		t.Fatalf("known executors file mode %04o, want 0600", fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if modeBitsGuard && di.Mode().Perm() != 0o700 {
		t.Fatalf("known executors directory mode %04o, want 0700", di.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if string(data) != addr+" "+key.Fingerprint()+"\n" {
		t.Fatalf("file contents %q, want %q", data, addr+" "+key.Fingerprint()+"\n")
	}
}

func TestKnownExecutorsChangedKeyIsKeyMismatchError(t *testing.T) {
	path := knownPath(t)
	ke, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatal(err)
	}
	const addr = "unix:///run/outpost/exec.sock"
	pinned, presented := mustGenerate(t).PublicKey(), mustGenerate(t).PublicKey()
	if err := ke.Pin(addr, pinned); err != nil {
		t.Fatal(err)
	}
	err = ke.Check(addr, presented)
	var km *KeyMismatchError
	if !errors.As(err, &km) {
		t.Fatalf("Check of a changed key = %v, want *KeyMismatchError", err)
	}
	if km.Addr != addr || km.Pinned != pinned || km.Presented != presented || km.File != path {
		t.Fatalf("KeyMismatchError fields = %+v", km)
	}
	want := "executor key for " + addr + " changed: pinned " + pinned.Fingerprint() +
		", presented " + presented.Fingerprint() +
		"; if this change is expected, remove the line for " + addr + " from " + path
	if err.Error() != want {
		t.Fatalf("message\n got %q\nwant %q", err.Error(), want)
	}
	// Pinning over it is refused too, and writes nothing.
	before, _ := os.ReadFile(path)
	if err := ke.Pin(addr, presented); !errors.As(err, &km) {
		t.Fatalf("Pin over an existing pin = %v, want *KeyMismatchError", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a refused Pin changed the file")
	}
}

func TestKnownExecutorsUnknownAddressIsErrNotPinned(t *testing.T) {
	ke, err := OpenKnownExecutors(knownPath(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := ke.Pin("tcp://a:1", mustGenerate(t).PublicKey()); err != nil {
		t.Fatal(err)
	}
	if err := ke.Check("tcp://b:1", mustGenerate(t).PublicKey()); !errors.Is(err, ErrNotPinned) {
		t.Fatalf("Check of an unknown address = %v, want ErrNotPinned", err)
	}
	// Addresses are exact strings, not normalised.
	if _, ok := ke.Lookup("tcp://A:1"); ok {
		t.Fatal("Lookup matched an address differing in case")
	}
}

func TestKnownExecutorsPinsPersistAcrossReopen(t *testing.T) {
	path := knownPath(t)
	ke, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]PublicKey{}
	for i := 0; i < 5; i++ {
		addr := fmt.Sprintf("tcp://host%d:7000", i)
		want[addr] = mustGenerate(t).PublicKey()
		if err := ke.Pin(addr, want[addr]); err != nil {
			t.Fatal(err)
		}
	}
	again, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatal(err)
	}
	for addr, key := range want {
		if err := again.Check(addr, key); err != nil {
			t.Errorf("after reopen, Check(%s) = %v", addr, err)
		}
	}
}

func TestKnownExecutorsPinHonoursAPinWrittenByAnotherProcess(t *testing.T) {
	path := knownPath(t)
	first, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatal(err)
	}
	second, err := OpenKnownExecutors(path) // opened before first pins: stale view
	if err != nil {
		t.Fatal(err)
	}
	const addr = "tcp://exec:7000"
	real, impostor := mustGenerate(t).PublicKey(), mustGenerate(t).PublicKey()
	if err := first.Pin(addr, real); err != nil {
		t.Fatal(err)
	}
	var km *KeyMismatchError
	if err := second.Pin(addr, impostor); !errors.As(err, &km) || km.Pinned != real {
		t.Fatalf("Pin of a different key after another process pinned = %v, want *KeyMismatchError", err)
	}
	if err := second.Pin(addr, real); err != nil {
		t.Fatalf("re-pinning the same key = %v", err)
	}
	if err := second.Check(addr, real); err != nil {
		t.Fatalf("Check after learning the other pin = %v", err)
	}
	data, _ := os.ReadFile(path)
	if n := strings.Count(string(data), "\n"); n != 1 {
		t.Fatalf("file has %d lines, want 1 (no duplicate or conflicting pin):\n%s", n, data)
	}
}

func TestKnownExecutorsConflictingLinesRejectedAtLoad(t *testing.T) {
	a, b := mustGenerate(t).PublicKey(), mustGenerate(t).PublicKey()
	path := filepath.Join(t.TempDir(), "known_executors")
	writeFile(t, path, "tcp://x:1 "+a.Fingerprint()+"\n"+
		"tcp://y:1 "+b.Fingerprint()+"\n"+
		"tcp://x:1 "+b.Fingerprint()+"\n", 0o600)
	_, err := OpenKnownExecutors(path)
	if !errors.Is(err, ErrConflictingPins) {
		t.Fatalf("OpenKnownExecutors with two keys for one address = %v, want ErrConflictingPins", err)
	}
	wantErrContaining(t, err, path, "lines 1 and 3", "tcp://x:1", a.Fingerprint(), b.Fingerprint())
}

func TestKnownExecutorsDuplicateIdenticalLinesAreFine(t *testing.T) {
	a := mustGenerate(t).PublicKey()
	path := filepath.Join(t.TempDir(), "known_executors")
	writeFile(t, path, "# pins\n\ntcp://x:1 "+a.Fingerprint()+" first\r\ntcp://x:1\t"+a.Fingerprint()+"\n", 0o600)
	ke, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ke.Check("tcp://x:1", a); err != nil {
		t.Fatal(err)
	}
}

func TestKnownExecutorsMalformedLineNamesFileAndLine(t *testing.T) {
	a := mustGenerate(t).PublicKey()
	for _, tc := range []struct {
		contents string
		line     int
	}{
		{"# c\ntcp://x:1\n", 2},
		{"tcp://x:1 " + a.Fingerprint() + "\ntcp://y:1 nope\n", 2},
		{"\n\n\n" + a.Fingerprint() + "\n", 4},
	} {
		path := filepath.Join(t.TempDir(), "known_executors")
		writeFile(t, path, tc.contents, 0o600)
		_, err := OpenKnownExecutors(path)
		wantErrContaining(t, err, fmt.Sprintf("%s:%d:", path, tc.line))
	}
}

func TestKnownExecutorsWritableByOthersIsRefused(t *testing.T) {
	needModeBits(t)
	path := filepath.Join(t.TempDir(), "known_executors")
	writeFile(t, path, "", 0o666)
	if _, err := OpenKnownExecutors(path); err == nil {
		t.Fatal("opened a world-writable known executors file")
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	ke, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o622); err != nil {
		t.Fatal(err)
	}
	if err := ke.Pin("tcp://x:1", mustGenerate(t).PublicKey()); err == nil {
		t.Fatal("pinned into a world-writable known executors file")
	}
}

func TestKnownExecutorsPinRejectsAddressesThatCannotBeReadBack(t *testing.T) {
	ke, err := OpenKnownExecutors(knownPath(t))
	if err != nil {
		t.Fatal(err)
	}
	key := mustGenerate(t).PublicKey()
	for _, addr := range []string{"", "tcp://a b:1", "tcp://a\n:1", "#tcp://a:1", "tcp://a\t:1", "tcp://\xff:1", "tcp://a\u00a0:1"} {
		if err := ke.Pin(addr, key); err == nil {
			t.Errorf("Pin(%q) accepted an address the file cannot hold", addr)
		}
	}
	if err := ke.Pin("tcp://a:1", PublicKey{}); err == nil {
		t.Error("Pin accepted the zero key")
	}
}

func TestKnownExecutorsPinAfterUnterminatedLineKeepsLinesApart(t *testing.T) {
	a, b := mustGenerate(t).PublicKey(), mustGenerate(t).PublicKey()
	path := filepath.Join(t.TempDir(), "known_executors")
	writeFile(t, path, "tcp://x:1 "+a.Fingerprint(), 0o600) // hand-edited, no final newline
	ke, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ke.Pin("tcp://y:1", b); err != nil {
		t.Fatal(err)
	}
	again, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatal(err)
	}
	if again.Check("tcp://x:1", a) != nil || again.Check("tcp://y:1", b) != nil {
		t.Fatal("appending after an unterminated line corrupted the file")
	}
}

func TestConcurrentPinFromGoroutinesYieldsAParseableFile(t *testing.T) {
	path := knownPath(t)
	shared := mustGenerate(t).PublicKey()
	const n = 16
	keys := make([]PublicKey, n)
	for i := range keys {
		keys[i] = mustGenerate(t).PublicKey()
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Separate instances, as separate processes would have.
			ke, err := OpenKnownExecutors(path)
			if err != nil {
				errs[i] = err
				return
			}
			<-start
			if err := ke.Pin(fmt.Sprintf("tcp://host%d:7000", i), keys[i]); err != nil {
				errs[i] = err
				return
			}
			errs[i] = ke.Pin("tcp://shared:7000", shared)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("goroutine %d: %v", i, err)
		}
	}
	ke, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatalf("file written by concurrent Pins does not parse: %v", err)
	}
	for i := 0; i < n; i++ {
		if err := ke.Check(fmt.Sprintf("tcp://host%d:7000", i), keys[i]); err != nil {
			t.Error(err)
		}
	}
	if err := ke.Check("tcp://shared:7000", shared); err != nil {
		t.Error(err)
	}
	data, _ := os.ReadFile(path)
	if got := strings.Count(string(data), "\n"); got != n+1 {
		t.Fatalf("file has %d lines, want %d:\n%s", got, n+1, data)
	}
}

func TestConcurrentFirstPinsOfOneAddressLeaveExactlyOneWinner(t *testing.T) {
	// Each goroutine has its own instance (no shared mutex), as separate
	// processes would: only the file lock keeps two different first pins
	// from both landing in the file.
	for round := 0; round < 30; round++ {
		path := knownPath(t)
		const n = 8
		keys := make([]PublicKey, n)
		insts := make([]*KnownExecutors, n)
		for i := range keys {
			keys[i] = mustGenerate(t).PublicKey()
			ke, err := OpenKnownExecutors(path)
			if err != nil {
				t.Fatal(err)
			}
			insts[i] = ke
		}
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = insts[i].Pin("tcp://contested:7000", keys[i])
			}()
		}
		close(start)
		wg.Wait()
		ke, err := OpenKnownExecutors(path)
		if err != nil {
			t.Fatalf("round %d: concurrent first pins corrupted the file: %v", round, err)
		}
		winner, ok := ke.Lookup("tcp://contested:7000")
		if !ok {
			t.Fatal("no pin recorded")
		}
		wins := 0
		for i, err := range errs {
			var km *KeyMismatchError
			switch {
			case err == nil:
				wins++
				if keys[i] != winner {
					t.Fatalf("Pin %d succeeded but the file pins another key", i)
				}
			case errors.As(err, &km):
				if km.Pinned != winner || km.Presented != keys[i] {
					t.Fatalf("loser %d: %v does not name the winning key", i, err)
				}
			default:
				t.Fatalf("Pin %d: %v", i, err)
			}
		}
		if wins != 1 {
			t.Fatalf("%d first pins succeeded, want exactly 1", wins)
		}
	}
}

// TestConcurrentPinFromProcessesYieldsAParseableFile runs the pinning in
// separate processes (this test binary re-executed), which share no mutex.
func TestConcurrentPinFromProcessesYieldsAParseableFile(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := knownPath(t)
	shared := mustGenerate(t).PublicKey()
	const procs, perProc = 4, 25
	cmds := make([]*exec.Cmd, procs)
	for p := range cmds {
		cmd := exec.Command(exe, "-test.run=^TestHelperPinProcess$")
		cmd.Env = append(os.Environ(),
			"OUTPOST_IDENTITY_HELPER=1",
			"OUTPOST_IDENTITY_HELPER_PATH="+path,
			"OUTPOST_IDENTITY_HELPER_PROC="+strconv.Itoa(p),
			"OUTPOST_IDENTITY_HELPER_N="+strconv.Itoa(perProc),
			"OUTPOST_IDENTITY_HELPER_SHARED="+shared.Fingerprint())
		cmds[p] = cmd
	}
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for p, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[p], errs[p] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for p := range cmds {
		if errs[p] != nil {
			t.Fatalf("helper %d: %v\n%s", p, errs[p], outs[p])
		}
	}
	ke, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatalf("file written by concurrent processes does not parse: %v", err)
	}
	data, _ := os.ReadFile(path)
	if got, want := strings.Count(string(data), "\n"), procs*perProc+1; got != want {
		t.Fatalf("file has %d lines, want %d", got, want)
	}
	for p := 0; p < procs; p++ {
		for i := 0; i < perProc; i++ {
			if _, ok := ke.Lookup(fmt.Sprintf("tcp://p%d-h%d:7000", p, i)); !ok {
				t.Errorf("pin p%d-h%d missing", p, i)
			}
		}
	}
	if err := ke.Check("tcp://shared:7000", shared); err != nil {
		t.Error(err)
	}
}

func TestHelperPinProcess(t *testing.T) {
	if os.Getenv("OUTPOST_IDENTITY_HELPER") != "1" {
		t.Skip("helper for TestConcurrentPinFromProcessesYieldsAParseableFile")
	}
	path := os.Getenv("OUTPOST_IDENTITY_HELPER_PATH")
	p := os.Getenv("OUTPOST_IDENTITY_HELPER_PROC")
	n, _ := strconv.Atoi(os.Getenv("OUTPOST_IDENTITY_HELPER_N"))
	shared, err := ParsePublicKey(os.Getenv("OUTPOST_IDENTITY_HELPER_SHARED"))
	if err != nil {
		t.Fatal(err)
	}
	ke, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := ke.Pin(fmt.Sprintf("tcp://p%s-h%d:7000", p, i), mustGenerate(t).PublicKey()); err != nil {
			t.Fatal(err)
		}
		if err := ke.Pin("tcp://shared:7000", shared); err != nil {
			t.Fatal(err)
		}
	}
}

// ---- fuzzing ----

func FuzzParsePublicKey(f *testing.F) {
	f.Add("G_HPNbTmpEoCkYNxy63m5TcHqYXT8UdDZ4utYcUi9BI")
	f.Add("G/HPNbTmpEoCkYNxy63m5TcHqYXT8UdDZ4utYcUi9BI=")
	f.Add("")
	f.Add(strings.Repeat("A", 43))
	f.Add(strings.Repeat("_", 43))
	f.Add(" G_HPNbTmpEoCkYNxy63m5TcHqYXT8UdDZ4utYcUi9BI\n")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParsePublicKey(s)
		if err != nil {
			if !k.IsZero() {
				t.Fatal("error with a non-zero key")
			}
			return
		}
		if k.IsZero() {
			t.Fatal("accepted the zero key")
		}
		fp := k.Fingerprint()
		if len(fp) != FingerprintLen {
			t.Fatalf("fingerprint %q has length %d", fp, len(fp))
		}
		again, err := ParsePublicKey(fp)
		if err != nil {
			t.Fatalf("ParsePublicKey(%q) accepted, but its fingerprint %q does not parse: %v", s, fp, err)
		}
		if again != k {
			t.Fatalf("fingerprint %q of %q parses to a different key", fp, s)
		}
	})
}

func FuzzParseAllowList(f *testing.F) {
	k := "G_HPNbTmpEoCkYNxy63m5TcHqYXT8UdDZ4utYcUi9BI"
	f.Add([]byte("# c\n\n" + k + " comment\n"))
	f.Add([]byte(k + "\r\n" + k))
	f.Add([]byte("bad line\n"))
	f.Add([]byte("\t \n#\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := parseAllowList("fuzz", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "identity: fuzz:") {
				t.Fatalf("error %q does not name the file and line", err)
			}
			return
		}
		// Re-serializing the keys must give a file with the same set.
		var sb strings.Builder
		for k := range keys {
			if k.IsZero() {
				t.Fatal("accepted the zero key")
			}
			sb.WriteString(k.Fingerprint() + "\n")
		}
		again, err := parseAllowList("again", []byte(sb.String()))
		if err != nil {
			t.Fatalf("canonical form does not parse: %v", err)
		}
		if len(again) != len(keys) {
			t.Fatalf("canonical form has %d keys, want %d", len(again), len(keys))
		}
		for k := range keys {
			if _, ok := again[k]; !ok {
				t.Fatalf("key %v lost in the canonical form", k)
			}
		}
	})
}

func FuzzParseKnownExecutors(f *testing.F) {
	k := "G_HPNbTmpEoCkYNxy63m5TcHqYXT8UdDZ4utYcUi9BI"
	f.Add([]byte("# c\ntcp://h:7000 " + k + " note\nunix:///run/x.sock\t" + k + "\n"))
	f.Add([]byte("tcp://h:1 " + k + "\ntcp://h:1 " + k + "\n"))
	f.Add([]byte("tcp://h:1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pins, err := parseKnownExecutors("fuzz", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "identity: fuzz") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		// Every parsed pin must be writable by Pin and read back equal.
		var sb strings.Builder
		for addr, p := range pins {
			if err := validAddr(addr); err != nil {
				t.Fatalf("parsed an address Pin would refuse: %v", err)
			}
			sb.WriteString(addr + " " + p.key.Fingerprint() + "\n")
		}
		again, err := parseKnownExecutors("again", []byte(sb.String()))
		if err != nil {
			t.Fatalf("canonical form does not parse: %v", err)
		}
		if len(again) != len(pins) {
			t.Fatalf("canonical form has %d pins, want %d", len(again), len(pins))
		}
		for addr, p := range pins {
			if again[addr].key != p.key {
				t.Fatalf("pin for %q changed in the canonical form", addr)
			}
		}
	})
}

func FuzzParseKeyFile(f *testing.F) {
	f.Add([]byte(KeyFileHeader + "\nAQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n"))
	f.Add([]byte(KeyFileHeader + "\r\nAQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA="))
	f.Add([]byte("outpost-x25519-private-key v2\nAAAA\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := parseKeyFile(data)
		if err != nil {
			return
		}
		again, err := parseKeyFile(marshalKeyFile(k))
		if err != nil || again != k {
			t.Fatalf("canonical form of an accepted key file does not round-trip: %v", err)
		}
		if d, err := KeyFromPrivate(k.Private); err != nil || d.Public != k.Public {
			t.Fatal("public key not derived from the private key")
		}
	})
}

// needModeBits skips a test of permission bits where the platform has
// none that mean anything (Windows: see modeBitsGuard).
func needModeBits(t *testing.T) {
	t.Helper()
	if !modeBitsGuard {
		t.Skip("permission bits are not checked on this platform (ACLs are a TODO)")
	}
}

// userDir, as macOS and Windows use it: an absolute XDG variable still
// wins (tests and wrappers rely on it), else the platform's directory;
// a platform that cannot name one gives "", never a relative path.
func TestUserDirPrefersXDGThenThePlatformsPlace(t *testing.T) {
	native := func() (string, error) { return filepath.FromSlash("/native/cfg"), nil }
	t.Setenv("OUTPOST_TEST_XDG", "")
	if got, want := userDir("OUTPOST_TEST_XDG", native, ".config"), filepath.Join(filepath.FromSlash("/native/cfg"), "outpost"); got != want {
		t.Errorf("no XDG variable: %q, want %q", got, want)
	}
	t.Setenv("OUTPOST_TEST_XDG", "relative")
	if got, want := userDir("OUTPOST_TEST_XDG", native, ".config"), filepath.Join(filepath.FromSlash("/native/cfg"), "outpost"); got != want {
		t.Errorf("relative XDG variable: %q, want %q", got, want)
	}
	abs := t.TempDir()
	t.Setenv("OUTPOST_TEST_XDG", abs)
	if got, want := userDir("OUTPOST_TEST_XDG", native, ".config"), filepath.Join(abs, "outpost"); got != want {
		t.Errorf("absolute XDG variable: %q, want %q", got, want)
	}
	t.Setenv("OUTPOST_TEST_XDG", "")
	failing := func() (string, error) { return "", errors.New("no profile") }
	if got := userDir("OUTPOST_TEST_XDG", failing, ".config"); got != "" {
		t.Errorf("platform without a directory: %q, want \"\"", got)
	}
}
