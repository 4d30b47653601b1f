package fakesglang

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/sglargs"
)

// DefaultBrokenIf is the server flag that makes the fake answer like the seed's broken
// server when no --fake-broken-if is given.
const DefaultBrokenIf = "fp4-gemm-backend=flashinfer_cudnn"

// Args is a parsed command line: every --name (or -name) with its values, in order.
// Flags the fake does not know are kept and ignored, as a real launch line carries many.
type Args map[string][]string

// ParseArgs reads a command line the way SGLang's launcher would get it:
// "--name value", "--name=value" and bare "--flag"; a value is the next argument when it
// does not start with "--". Positional arguments are ignored.
func ParseArgs(args []string) Args {
	out := Args{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue
		}
		name := strings.TrimLeft(a, "-")
		if n, v, ok := strings.Cut(name, "="); ok {
			out[n] = append(out[n], v)
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			out[name] = append(out[name], args[i+1])
			i++
			continue
		}
		out[name] = append(out[name], "")
	}
	return out
}

// ServerArgsOf is what /server_info reports for a launch line: SGLang's
// dataclasses.asdict(server_args) merged with its scheduler info. Here: the fields of
// the flags sglprov knows (sglargs.Table) at their declared defaults (null where SGLang
// computes them at start), then each flag the line gives (the fake's own --fake-* ones
// left out) under its ServerArgs field (--fp4-gemm-backend: fp4_gemm_runner_backend,
// --tp: tp_size, a deprecated alias such as --cuda-graph-max-bs under the field of the
// newer series, cuda_graph_max_bs_decode), in JSON's forms as Python writes them: an int
// as a whole number, a float with its fraction (0.8, 1.0), a list as a list, a flag
// without a value as true; and "version".
func ServerArgsOf(args []string) map[string]any {
	out := sglargs.Defaults()
	out["version"] = "fake"
	for _, s := range sglargs.Parse(args) {
		if strings.HasPrefix(s.Name, "--fake-") {
			continue
		}
		field, v, ok := s.Report()
		if !ok {
			continue
		}
		if s.Known {
			// The field of the newest series the table knows.
			field = s.Flag.Fields[len(s.Flag.Fields)-1]
		}
		out[field] = v
	}
	return out
}

// Get returns the last value of a flag, or def.
func (a Args) Get(name, def string) string {
	if v := a[name]; len(v) > 0 {
		return v[len(v)-1]
	}
	return def
}

// Has reports whether the flag was given.
func (a Args) Has(name string) bool { return len(a[name]) > 0 }

// Config is what the binary makes of its command line.
type Config struct {
	Host, Port string
	// Model is the served model name; ModelPath the loaded model.
	Model, ModelPath string
	// ContextLength is --context-length (0: the fake's default).
	ContextLength int
	Mode          Mode
	CrashAfter    time.Duration
	ReadyAfter    time.Duration
	PortFile      string
	// BrokenBy names the launch flag that made the server broken ("" when none did).
	BrokenBy         string
	NoHealthGenerate bool
	// RawToolCalls is set when the launch line lacks --tool-call-parser qwen3_coder;
	// InlineThink when it lacks --reasoning-parser qwen3 (as a real server, the fake then
	// leaves tool calls and thinking as text in the content).
	RawToolCalls, InlineThink bool
	// CrowdedAbove and Latency are --fake-crowded-above and --fake-latency.
	CrowdedAbove int
	// LongAbove is --fake-long-above, else SGLang's own --chunked-prefill-size (mode
	// long-context: garbage past one prefill chunk); MixedSpread is --fake-mixed-spread.
	LongAbove, MixedSpread int
	Latency                time.Duration
	// BrokenWhile is --fake-broken-while FILE: garbage (the --fake-broken-mode) while FILE
	// exists, checked at every request; BrokenMode that mode.
	BrokenWhile string
	BrokenMode  Mode
	// AnswerBytes is --fake-answer-bytes.
	AnswerBytes int
	// CacheReport is SGLang's own --enable-cache-report; TokenLatency --fake-token-latency
	// (each generated token's time); LoopAfter --fake-loop-after (mode word-loop).
	CacheReport  bool
	TokenLatency time.Duration
	LoopAfter    int
}

// The parsers a launch line must name for tool calls and thinking to come back split
// from the content (Qwen3.5's formats).
const (
	ToolCallParser  = "qwen3_coder"
	ReasoningParser = "qwen3"
)

// ParseConfig turns a command line (and the environment, through getenv) into a Config.
// The fake's own flags: --fake-mode MODE (or SGLANG_FAKE_MODE), --fake-broken-if FLAG=VALUE
// (repeatable; default fp4-gemm-backend=flashinfer_cudnn; "none" for no condition),
// --fake-broken-mode MODE (what a broken server does, default bang), --fake-ready-after DUR,
// --fake-port-file PATH, --fake-no-health-generate, --fake-crowded-above N (mode crowded:
// garbage once more than N requests are in flight), --fake-latency DUR (each request's
// time), --fake-broken-while FILE (the broken mode while FILE exists, read at every
// request), --fake-long-above N (mode long-context: garbage to a prompt of more than N
// tokens; default SGLang's own --chunked-prefill-size, else 8192), --fake-mixed-spread N
// (mode mixed-batch: garbage to a request in flight with one whose prompt differs from its
// own by more than N tokens; default 256). SGLang's own --tool-call-parser and --reasoning-parser decide whether tool calls
// and thinking come back parsed (qwen3_coder, qwen3) or as raw text in the content.
// --fake-answer-bytes N pads every text answer with fluent filler to N bytes.
// --fake-token-latency DUR is each generated token's time; --fake-loop-after N the words
// mode word-loop answers well; SGLang's own --enable-cache-report reports cached tokens.
func ParseConfig(args []string, getenv func(string) string) (Config, error) {
	a := ParseArgs(args)
	c := Config{
		Host:             a.Get("host", "127.0.0.1"),
		Port:             a.Get("port", "30000"),
		PortFile:         a.Get("fake-port-file", ""),
		NoHealthGenerate: a.Has("fake-no-health-generate"),
		RawToolCalls:     a.Get("tool-call-parser", "") != ToolCallParser,
		InlineThink:      a.Get("reasoning-parser", "") != ReasoningParser,
	}
	for _, parse := range []func(Args) error{c.parseLoad, c.parseTiming, c.parseModel,
		func(a Args) error { return c.parseMode(a, getenv) }, c.parseBroken} {
		if err := parse(a); err != nil {
			return c, err
		}
	}
	return c, nil
}

// parseLoad reads the flags of the load the fake breaks under: --fake-crowded-above,
// --chunked-prefill-size and --fake-long-above, --fake-mixed-spread, --fake-answer-bytes.
func (c *Config) parseLoad(a Args) error {
	if v := a.Get("fake-crowded-above", ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("--fake-crowded-above %q: want a whole number above 0", v)
		}
		c.CrowdedAbove = n
	}
	for _, f := range []struct {
		flag string
		to   *int
	}{{"chunked-prefill-size", &c.LongAbove}, {"fake-long-above", &c.LongAbove}, {"fake-mixed-spread", &c.MixedSpread}} {
		v := a.Get(f.flag, "")
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if f.flag == "chunked-prefill-size" && (err != nil || n < 1) {
			continue // SGLang's own flag: -1 turns chunking off; the fake's default stays
		}
		if err != nil || n < 1 {
			return fmt.Errorf("--%s %q: want a whole number of tokens above 0", f.flag, v)
		}
		*f.to = n
	}
	if v := a.Get("fake-answer-bytes", ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1<<30 {
			return fmt.Errorf("--fake-answer-bytes %q: want a number of bytes up to 1 GiB", v)
		}
		c.AnswerBytes = n
	}
	return nil
}

// parseTiming reads --fake-latency, --enable-cache-report, --fake-token-latency and
// --fake-loop-after.
func (c *Config) parseTiming(a Args) error {
	if v := a.Get("fake-latency", ""); v != "" {
		d, err := parseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("--fake-latency %q: want a duration such as 20ms", v)
		}
		c.Latency = d
	}
	c.CacheReport = a.Has("enable-cache-report")
	if v := a.Get("fake-token-latency", ""); v != "" {
		d, err := parseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("--fake-token-latency %q: want a duration such as 1ms", v)
		}
		c.TokenLatency = d
	}
	if v := a.Get("fake-loop-after", ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("--fake-loop-after %q: want a whole number of words above 0", v)
		}
		c.LoopAfter = n
	}
	return nil
}

// parseModel reads the model's path, served name and --context-length.
func (c *Config) parseModel(a Args) error {
	c.ModelPath = a.Get("model-path", a.Get("model", "default"))
	c.Model = a.Get("served-model-name", c.ModelPath)
	if v := a.Get("context-length", ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("--context-length %q: want a whole number above 0", v)
		}
		c.ContextLength = n
	}
	return nil
}

// parseMode reads --fake-mode (else SGLANG_FAKE_MODE, else good), crash-after=DUR among
// them, and --fake-ready-after.
func (c *Config) parseMode(a Args, getenv func(string) string) error {
	mode := a.Get("fake-mode", "")
	if mode == "" && getenv != nil {
		mode = getenv("SGLANG_FAKE_MODE")
	}
	if mode == "" {
		mode = string(ModeGood)
	}
	if after, ok := strings.CutPrefix(mode, string(ModeCrashAfter)+"="); ok {
		d, err := parseDuration(after)
		if err != nil {
			return fmt.Errorf("--fake-mode %s: %w", mode, err)
		}
		c.CrashAfter, mode = d, string(ModeCrashAfter)
	}
	c.Mode = Mode(mode)
	if !c.Mode.Valid() {
		return fmt.Errorf("--fake-mode %q: unknown mode", mode)
	}
	if c.Mode == ModeCrashAfter && c.CrashAfter == 0 {
		c.CrashAfter = time.Second
	}
	if v := a.Get("fake-ready-after", ""); v != "" {
		d, err := parseDuration(v)
		if err != nil {
			return fmt.Errorf("--fake-ready-after: %w", err)
		}
		c.ReadyAfter = d
	}
	return nil
}

// parseBroken reads --fake-broken-mode, --fake-broken-while and --fake-broken-if: a
// good (or slow-ready) server whose launch line meets a condition is broken.
func (c *Config) parseBroken(a Args) error {
	brokenMode := Mode(a.Get("fake-broken-mode", string(ModeBang)))
	if !brokenMode.Valid() {
		return fmt.Errorf("--fake-broken-mode %q: unknown mode", brokenMode)
	}
	if c.BrokenWhile = a.Get("fake-broken-while", ""); c.BrokenWhile != "" {
		c.BrokenMode = brokenMode
	}
	conds := a["fake-broken-if"]
	if len(conds) == 0 {
		conds = []string{DefaultBrokenIf}
	}
	for _, cond := range conds {
		if cond == "none" || cond == "" {
			continue
		}
		flag, want, ok := strings.Cut(cond, "=")
		if !ok {
			return fmt.Errorf("--fake-broken-if %q: want FLAG=VALUE", cond)
		}
		flag = strings.TrimLeft(flag, "-")
		for _, got := range a[flag] {
			if got == want && c.BrokenBy == "" {
				c.BrokenBy = "--" + flag + "=" + want
			}
		}
	}
	if c.BrokenBy != "" && (c.Mode == ModeGood || c.Mode == ModeSlowReady) {
		c.Mode = brokenMode
	}
	return nil
}

// parseDuration reads "2s", "150ms" or a bare number of seconds.
func parseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(n * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
}

// Main runs the fake-sglang binary: it serves until ctx ends (SIGTERM) and returns the exit
// code. Modes crash and crash-after exit 1 the way a failing server does.
func Main(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) int {
	cfg, err := ParseConfig(args, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "fake-sglang: %v\n", err)
		return 2
	}
	if cfg.Mode == ModeCrash {
		fmt.Fprintln(stderr, "fake-sglang: loading model", cfg.Model)
		fmt.Fprintln(stderr, "RuntimeError: CUDA error: no kernel image is available for execution on the device")
		return 1
	}
	reportKernelCaches(stderr, getenv, args)
	// Across nodes (--nnodes), the ranks meet at --dist-init-addr before anything serves.
	grp, err := startGroup(ctx, args, getenv, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "fake-sglang: %v\n", err)
		return 1
	}
	defer grp.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, cfg.Port))
	if err != nil {
		fmt.Fprintf(stderr, "fake-sglang: %v\n", err)
		return 1
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	if cfg.PortFile != "" {
		if err := writeFileAtomic(cfg.PortFile, port+"\n"); err != nil {
			fmt.Fprintf(stderr, "fake-sglang: writing port file: %v\n", err)
			ln.Close()
			return 1
		}
	}
	srv := &http.Server{
		Handler:           grp.Wrap(New(cfg.options(args, stderr))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	cfg.announce(stderr, port)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return cfg.serveUntil(ctx, srv, grp, errc, stderr)
}

// options are the server's Options for the launch line args, logging to stderr.
func (c Config) options(args []string, stderr io.Writer) Options {
	return Options{Mode: c.Mode, Model: c.Model, ModelPath: c.ModelPath,
		ContextLength: c.ContextLength, ReadyAfter: c.ReadyAfter,
		NoHealthGenerate: c.NoHealthGenerate, Log: stderr, RawToolCalls: c.RawToolCalls,
		InlineThink: c.InlineThink, CrowdedAbove: c.CrowdedAbove, Latency: c.Latency,
		LongAbove: c.LongAbove, MixedSpread: c.MixedSpread,
		BrokenWhile: c.BrokenWhile, BrokenMode: c.BrokenMode,
		AnswerBytes: c.AnswerBytes, ServerArgs: ServerArgsOf(args),
		CacheReport: c.CacheReport, TokenLatency: c.TokenLatency, LoopAfter: c.LoopAfter}
}

// announce says what the fake serves where, in which mode and why, and which parsers
// its launch line lacks.
func (c Config) announce(stderr io.Writer, port string) {
	why := ""
	if c.BrokenBy != "" {
		why = " (broken by " + c.BrokenBy + ")"
	}
	fmt.Fprintf(stderr, "fake-sglang: serving %s on http://%s mode=%s%s\n", c.Model,
		net.JoinHostPort(c.Host, port), c.Mode, why)
	if c.RawToolCalls {
		fmt.Fprintf(stderr, "fake-sglang: no --tool-call-parser %s: tool calls stay raw text in the content\n", ToolCallParser)
	}
	if c.InlineThink {
		fmt.Fprintf(stderr, "fake-sglang: no --reasoning-parser %s: thinking stays inline in the content\n", ReasoningParser)
	}
}

// serveUntil waits for the end of the serving srv: ctx ending (a clean stop), the group
// failing, mode crash-after's crash, or the server's own error (errc); it returns the
// exit code.
func (c Config) serveUntil(ctx context.Context, srv *http.Server, grp *member, errc <-chan error, stderr io.Writer) int {
	var crash <-chan time.Time
	if c.Mode == ModeCrashAfter {
		t := time.NewTimer(c.CrashAfter)
		defer t.Stop()
		crash = t.C
	}
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		fmt.Fprintln(stderr, "fake-sglang: stopped")
		return 0
	case err := <-grp.Done():
		srv.Close()
		fmt.Fprintf(stderr, "fake-sglang: %v\n", err)
		return 1
	case <-crash:
		srv.Close()
		fmt.Fprintln(stderr, "fake-sglang: scheduler died: NCCL error: unhandled cuda error")
		return 1
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return 0
		}
		fmt.Fprintf(stderr, "fake-sglang: %v\n", err)
		return 1
	}
}

func writeFileAtomic(path, data string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".port-*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
