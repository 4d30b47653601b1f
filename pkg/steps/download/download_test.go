package download

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/safetensors"
	"github.com/sglprov/sglprov/test/fakehub"
)

const (
	repo   = "org/model"
	secret = "hf_SECRETsecretSECRET42"
)

// syncBuffer is a log sink safe for the concurrent writes of the downloader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	src  string // the model the hub serves
	hub  *fakehub.Hub
	dest string
	env  *engine.Env
	log  *syncBuffer
}

// newFixture generates a 3-shard model, serves it (shards over 16 KiB come from the CDN on
// another host name) and returns an env whose dest is empty.
func newFixture(t *testing.T, opt fakehub.Options) *fixture {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	if err := fakehub.GenerateModel(src, 3, 48<<10); err != nil {
		t.Fatal(err)
	}
	return serve(t, src, opt)
}

func serve(t *testing.T, src string, opt fakehub.Options) *fixture {
	t.Helper()
	opt.Repo = repo
	opt.FS = os.DirFS(src)
	opt.LFSThreshold = 16 << 10
	opt.CDNHost = "localhost"
	h, err := fakehub.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	h.Start()
	t.Cleanup(h.Close)
	dir := t.TempDir()
	log := &syncBuffer{}
	env := engine.NewTestEnv(dir, log)
	env.StepName = "weights"
	return &fixture{src: src, hub: h, dest: filepath.Join(dir, "models", "m"), env: env, log: log}
}

func (fx *fixture) hfSpec(rev string) Spec {
	return Spec{
		Dest: fx.dest,
		HF: &HFSpec{Repo: repo, Revision: rev, Endpoint: fx.hub.URL(),
			Include: []string{"*.safetensors", "*.json", "tokenizer*"}},
		Connections: 2, StallTimeout: "5s", Retries: 1,
	}
}

func (fx *fixture) step(t *testing.T, spec Spec, env map[string]string) *Step {
	t.Helper()
	st, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	st.getenv = func(k string) string { return env[k] }
	st.freeSpace = func(string) (uint64, error) { return 1 << 40, nil }
	st.retryWait = time.Millisecond
	return st
}

func (fx *fixture) srcFiles(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(fx.src)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// sameAsSource fails unless dest holds exactly the source's files, byte for byte.
func (fx *fixture) sameAsSource(t *testing.T) {
	t.Helper()
	for _, name := range fx.srcFiles(t) {
		want, _ := os.ReadFile(filepath.Join(fx.src, name))
		got, err := os.ReadFile(filepath.Join(fx.dest, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: dest differs from the source (%v)", name, err)
		}
	}
	ents, _ := os.ReadDir(fx.dest)
	if len(ents) != len(fx.srcFiles(t)) {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("dest holds %v, want only the source's files", names)
	}
}

func shardSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// corrupt flips a byte in the middle of the file, keeping its size.
func corrupt(t *testing.T, p string, keepMtime bool) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	off := fi.Size() - 100
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mt := fi.ModTime()
	if !keepMtime {
		mt = mt.Add(-time.Hour)
	}
	if err := os.Chtimes(p, mt, mt); err != nil {
		t.Fatal(err)
	}
}

func TestDownloadEndToEnd(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{})
	commit := fx.hub.Commit()
	st := fx.step(t, fx.hfSpec(commit), nil)
	shard := filepath.Join(fx.dest, "model-00002-of-00003.safetensors")

	t.Run("fingerprint of a pinned commit needs no request", func(t *testing.T) {
		fx.hub.ResetCounters()
		parts, err := st.Fingerprint(ctx, fx.env)
		if err != nil {
			t.Fatal(err)
		}
		if parts["hf.commit"] != commit || fx.hub.APIRequests() != 0 {
			t.Errorf("parts %v after %d API requests", parts, fx.hub.APIRequests())
		}
	})

	t.Run("intact before any run", func(t *testing.T) {
		ok, why, err := st.Intact(ctx, fx.env)
		if ok || err != nil || !strings.Contains(why, "no record") {
			t.Errorf("Intact = %v %q %v", ok, why, err)
		}
	})

	t.Run("first run downloads", func(t *testing.T) {
		fx.hub.ResetCounters()
		if err := st.Run(ctx, fx.env); err != nil {
			t.Fatalf("Run: %v\n%s", err, fx.log)
		}
		fx.sameAsSource(t)
		var total int64
		for _, n := range fx.srcFiles(t) {
			total += shardSize(t, filepath.Join(fx.src, n))
		}
		if got := fx.hub.BytesServed(); got != total {
			t.Errorf("served %d bytes, want %d", got, total)
		}
		var rec record
		if !fx.env.LoadData(&rec) || rec.Commit != commit || len(rec.Files) != len(fx.srcFiles(t)) {
			t.Errorf("record = %+v", rec)
		}
		if len(fx.hub.CDNAuthorizations()) != 0 {
			t.Error("the CDN received an Authorization header")
		}
	})

	t.Run("second check is intact without reading", func(t *testing.T) {
		fx.hub.ResetCounters()
		ok, why, err := st.Intact(ctx, fx.env)
		if !ok || err != nil {
			t.Fatalf("Intact = %v %q %v", ok, why, err)
		}
		if fx.hub.BytesServed() != 0 || fx.hub.FileRequests() != 0 || fx.hub.APIRequests() != 0 {
			t.Errorf("Intact talked to the hub: %d bytes, %d file requests", fx.hub.BytesServed(), fx.hub.FileRequests())
		}
	})

	t.Run("a re-run downloads nothing", func(t *testing.T) {
		fx.hub.ResetCounters()
		if err := st.Run(ctx, fx.env); err != nil {
			t.Fatal(err)
		}
		if fx.hub.BytesServed() != 0 || fx.hub.FileRequests() != 0 {
			t.Errorf("re-run served %d bytes", fx.hub.BytesServed())
		}
	})

	t.Run("touched file is re-hashed, not downloaded", func(t *testing.T) {
		later := time.Now().Add(time.Minute)
		if err := os.Chtimes(shard, later, later); err != nil {
			t.Fatal(err)
		}
		fx.hub.ResetCounters()
		ok, why, err := st.Intact(ctx, fx.env)
		if !ok || err != nil {
			t.Fatalf("Intact after touch = %v %q %v", ok, why, err)
		}
		var rec record
		fx.env.LoadData(&rec)
		if rec.Files["model-00002-of-00003.safetensors"].MtimeNs != later.UnixNano() {
			t.Error("the record was not refreshed with the new mtime")
		}
		if fx.hub.BytesServed() != 0 {
			t.Errorf("served %d bytes", fx.hub.BytesServed())
		}
	})

	t.Run("corruption with the same stat is found by verify", func(t *testing.T) {
		corrupt(t, shard, true)
		ok, _, err := st.Intact(ctx, fx.env)
		if !ok || err != nil {
			t.Fatalf("without verify, stat-identical file should pass: %v %v", ok, err)
		}
		fx.env.Verify = true
		defer func() { fx.env.Verify = false }()
		ok, why, err := st.Intact(ctx, fx.env)
		if ok || err != nil || why != "outputs changed: "+shard {
			t.Fatalf("Intact with verify = %v %q %v", ok, why, err)
		}
		fx.hub.ResetCounters()
		if err := st.Run(ctx, fx.env); err != nil {
			t.Fatal(err)
		}
		fx.sameAsSource(t)
		if got, want := fx.hub.BytesServed(), shardSize(t, shard); got != want {
			t.Errorf("verify run served %d bytes, want only the bad shard's %d", got, want)
		}
	})

	t.Run("corrupted shard after download", func(t *testing.T) {
		corrupt(t, shard, false)
		ok, why, err := st.Intact(ctx, fx.env)
		if ok || err != nil || why != "outputs changed: "+shard {
			t.Fatalf("Intact = %v %q %v", ok, why, err)
		}
		fx.hub.ResetCounters()
		if err := st.Run(ctx, fx.env); err != nil {
			t.Fatal(err)
		}
		fx.sameAsSource(t)
		if got, want := fx.hub.BytesServed(), shardSize(t, shard); got != want {
			t.Errorf("served %d bytes, want %d", got, want)
		}
		if !strings.Contains(fx.log.String(), "downloading it again") {
			t.Error("no log line about the re-download")
		}
	})

	t.Run("missing file", func(t *testing.T) {
		p := filepath.Join(fx.dest, "tokenizer.json")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		ok, why, _ := st.Intact(ctx, fx.env)
		if ok || why != "outputs changed: "+p+" (missing)" {
			t.Errorf("Intact = %v %q", ok, why)
		}
		if err := st.Run(ctx, fx.env); err != nil {
			t.Fatal(err)
		}
		fx.sameAsSource(t)
	})
}

func TestFingerprintOfABranch(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{})
	st := fx.step(t, fx.hfSpec("main"), nil)
	parts, err := st.Fingerprint(ctx, fx.env)
	if err != nil || parts["hf.commit"] != fx.hub.Commit() {
		t.Fatalf("parts %v, %v", parts, err)
	}
	if err := st.Run(ctx, fx.env); err != nil {
		t.Fatal(err)
	}
	// With the hub gone, the recorded commit of the same revision is used.
	fx.hub.Close()
	parts, err = st.Fingerprint(ctx, fx.env)
	if err != nil || parts["hf.commit"] != fx.hub.Commit() {
		t.Errorf("offline parts %v, %v", parts, err)
	}
}

func TestGatedRepo(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{Token: secret})
	spec := fx.hfSpec(fx.hub.Commit())

	t.Run("no token", func(t *testing.T) {
		err := fx.step(t, spec, nil).Run(ctx, fx.env)
		if err == nil || !strings.Contains(err.Error(), "HF_TOKEN") || !strings.Contains(err.Error(), "401") {
			t.Fatalf("err = %v, want a 401 that says to set HF_TOKEN", err)
		}
		// The hub answers the listing of a gated repository and refuses the files: the
		// error names the cause and the fix once, for all of them.
		for _, w := range []string{"the hub refused", "GatedRepo", "is restricted", "accept its licence at", "more files the same way"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %q", err, w)
			}
		}
		if n := strings.Count(err.Error(), "accept its licence"); n != 1 {
			t.Errorf("the fix is said %d times: %q", n, err)
		}
	})
	t.Run("wrong token is not shown", func(t *testing.T) {
		err := fx.step(t, spec, map[string]string{"HF_TOKEN": "hf_wrongWRONGwrong"}).Run(ctx, fx.env)
		if err == nil || strings.Contains(err.Error(), "hf_wrongWRONGwrong") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("token file", func(t *testing.T) {
		tf := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tf, []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s := spec
		hf := *spec.HF
		hf.TokenFile = tf
		s.HF = &hf
		if err := fx.step(t, s, nil).Run(ctx, fx.env); err != nil {
			t.Fatal(err)
		}
		fx.sameAsSource(t)
		if got := fx.hub.CDNAuthorizations(); len(got) != 0 {
			t.Errorf("the CDN received %d Authorization headers", len(got))
		}
		if strings.Contains(fx.log.String(), secret) {
			t.Error("the token is in the log")
		}
		var rec json.RawMessage
		fx.env.LoadData(&rec)
		if len(rec) == 0 || strings.Contains(string(rec), secret) {
			t.Errorf("recorded data missing or holding the token: %s", rec)
		}
	})
}

func TestBadListingRefused(t *testing.T) {
	fx := newFixture(t, fakehub.Options{ExtraListing: []fakehub.Entry{{
		Type: "file", Path: "../x.json", Size: 2, OID: fakehub.GitBlobSHA1([]byte("{}")),
	}}})
	err := fx.step(t, fx.hfSpec(fx.hub.Commit()), nil).Run(context.Background(), fx.env)
	if err == nil || !strings.Contains(err.Error(), `"../x.json"`) {
		t.Fatalf("err = %v, want one naming ../x.json", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(fx.dest), "x.json")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a file was written outside dest")
	}
}

func TestBrokenWeightsUpstream(t *testing.T) {
	tests := []struct {
		name    string
		mangle  func(t *testing.T, src string)
		wantErr []string
	}{
		{name: "index names a missing tensor", mangle: func(t *testing.T, src string) {
			p := filepath.Join(src, safetensors.IndexFile)
			idx, err := safetensors.ReadIndex(p)
			if err != nil {
				t.Fatal(err)
			}
			idx.WeightMap["model.layers.9.mlp.experts.0.down_proj.weight"] = "model-00001-of-00003.safetensors"
			b, _ := json.Marshal(idx)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, wantErr: []string{`"model.layers.9.mlp.experts.0.down_proj.weight"`, "model-00001-of-00003.safetensors"}},
		{name: "truncated shard", mangle: func(t *testing.T, src string) {
			p := filepath.Join(src, "model-00003-of-00003.safetensors")
			if err := os.Truncate(p, shardSize(t, p)-10); err != nil {
				t.Fatal(err)
			}
		}, wantErr: []string{"model-00003-of-00003.safetensors", `tensor "model.layers.2.`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "src")
			if err := fakehub.GenerateModel(src, 3, 24<<10); err != nil {
				t.Fatal(err)
			}
			tt.mangle(t, src)
			fx := serve(t, src, fakehub.Options{})
			err := fx.step(t, fx.hfSpec(fx.hub.Commit()), nil).Run(context.Background(), fx.env)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestPlainFiles(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{})
	var files []FileSpec
	for _, name := range []string{"model-00001-of-00003.safetensors", "config.json"} {
		b, err := os.ReadFile(filepath.Join(fx.src, name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		files = append(files, FileSpec{
			URL:    fx.hub.URL() + "/" + repo + "/resolve/main/" + name,
			SHA256: strings.ToUpper(hex.EncodeToString(sum[:])),
			Path:   "sub/" + name,
		})
	}
	files[1].Path = "" // from the URL
	st := fx.step(t, Spec{Dest: fx.dest, Files: files}, nil)
	if err := st.Run(ctx, fx.env); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{"model-00001-of-00003.safetensors": "sub/model-00001-of-00003.safetensors", "config.json": "config.json"} {
		a, _ := os.ReadFile(filepath.Join(fx.src, src))
		b, err := os.ReadFile(filepath.Join(fx.dest, dst))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: wrong content (%v)", dst, err)
		}
	}
	if ok, why, err := st.Intact(ctx, fx.env); !ok || err != nil {
		t.Errorf("Intact = %v %q %v", ok, why, err)
	}
	if parts, err := st.Fingerprint(ctx, fx.env); err != nil || len(parts) != 0 {
		t.Errorf("Fingerprint = %v %v", parts, err)
	}

	t.Run("wrong digest", func(t *testing.T) {
		bad := []FileSpec{{URL: files[1].URL, SHA256: strings.Repeat("0", 64), Path: "bad.json"}}
		err := fx.step(t, Spec{Dest: fx.dest, Files: bad, Retries: -1}, nil).Run(ctx, fx.env)
		if err == nil || !strings.Contains(err.Error(), "sha256") {
			t.Errorf("err = %v, want a sha256 mismatch", err)
		}
	})
}

func TestSpecChecks(t *testing.T) {
	hf := &HFSpec{Repo: repo, Revision: "main"}
	file := FileSpec{URL: "https://mirror.example/x.safetensors", SHA256: strings.Repeat("a", 64)}
	tests := []struct {
		name    string
		spec    Spec
		wantErr string
	}{
		{name: "hf", spec: Spec{Dest: "/m", HF: hf}},
		{name: "files", spec: Spec{Dest: "/m", Files: []FileSpec{file}}},
		{name: "no dest", spec: Spec{HF: hf}, wantErr: "dest"},
		{name: "both", spec: Spec{Dest: "/m", HF: hf, Files: []FileSpec{file}}, wantErr: "exactly one"},
		{name: "neither", spec: Spec{Dest: "/m"}, wantErr: "exactly one"},
		{name: "bad repo", spec: Spec{Dest: "/m", HF: &HFSpec{Repo: "../etc"}}, wantErr: "hf.repo"},
		{name: "bad pattern", spec: Spec{Dest: "/m", HF: &HFSpec{Repo: repo, Include: []string{"[x"}}}, wantErr: "hf.include"},
		{name: "bad endpoint", spec: Spec{Dest: "/m", HF: &HFSpec{Repo: repo, Endpoint: "file:///x"}}, wantErr: "hf.endpoint"},
		{name: "bad stall", spec: Spec{Dest: "/m", HF: hf, StallTimeout: "soon"}, wantErr: "stall_timeout"},
		{name: "bad sha", spec: Spec{Dest: "/m", Files: []FileSpec{{URL: file.URL, SHA256: "abc"}}}, wantErr: "sha256"},
		{name: "bad url", spec: Spec{Dest: "/m", Files: []FileSpec{{URL: "ftp://x/y", SHA256: file.SHA256}}}, wantErr: "url"},
		{name: "escaping path", spec: Spec{Dest: "/m", Files: []FileSpec{{URL: file.URL, SHA256: file.SHA256, Path: "../x"}}}, wantErr: `"../x"`},
		{name: "duplicate path", spec: Spec{Dest: "/m", Files: []FileSpec{file, file}}, wantErr: "twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Kind().New("weights", &tt.spec)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, exitcode.ErrUsage) {
				t.Errorf("err = %v, want a usage error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestDownloadThroughMirrorWithoutTree: an HF_ENDPOINT mirror that serves no tree API:
// the step lists the files from the revision's siblings and HEADs, downloads them from the
// mirror and checks them against the sha256 and git sha1 the HEADs gave.
func TestDownloadThroughMirrorWithoutTree(t *testing.T) {
	fx := newFixture(t, fakehub.Options{NoTree: true})
	spec := fx.hfSpec("main")
	spec.HF.Endpoint = ""
	st := fx.step(t, spec, map[string]string{"HF_ENDPOINT": fx.hub.URL()})
	if err := st.Run(context.Background(), fx.env); err != nil {
		t.Fatalf("download through a mirror without /tree: %v", err)
	}
	fx.sameAsSource(t)
}

// TestHubOffline: with HF_HUB_OFFLINE set, the step asks the hub nothing: the fingerprint
// and the listing come from the last run's record, the files present are checked against
// it, and a missing one is an error that names it and the fix.
func TestHubOffline(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{})
	spec := fx.hfSpec("main")
	if err := fx.step(t, spec, nil).Run(ctx, fx.env); err != nil {
		t.Fatal(err)
	}
	fx.hub.ResetCounters()
	offline := map[string]string{"HF_HUB_OFFLINE": "1"}
	fp, err := fx.step(t, spec, offline).Fingerprint(ctx, fx.env)
	if err != nil || fp["hf.commit"] != fx.hub.Commit() {
		t.Fatalf("offline Fingerprint = %v, %v; want the recorded commit", fp, err)
	}
	if err := fx.step(t, spec, offline).Run(ctx, fx.env); err != nil {
		t.Fatalf("offline run over complete files: %v", err)
	}
	if _, _, err := fx.step(t, spec, offline).Preflight(ctx, fx.env, engine.CacheSlot{}); err != nil {
		t.Fatalf("offline plan: %v", err)
	}
	shard := "model-00002-of-00003.safetensors"
	if err := os.Remove(filepath.Join(fx.dest, shard)); err != nil {
		t.Fatal(err)
	}
	err = fx.step(t, spec, offline).Run(ctx, fx.env)
	if exitcode.Of(err) != exitcode.ExitHost || !strings.Contains(err.Error(), shard) || !strings.Contains(err.Error(), "unset HF_HUB_OFFLINE") {
		t.Errorf("offline run with a file missing = %v (exit %d), want exit 4 naming it", err, exitcode.Of(err))
	}
	if n := fx.hub.APIRequests() + fx.hub.FileRequests(); n != 0 {
		t.Errorf("the hub was asked %d times while HF_HUB_OFFLINE was set", n)
	}
}
