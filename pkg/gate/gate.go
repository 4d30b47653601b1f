package gate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of Config's zero values.
const (
	DefaultReadyTimeout   = 20 * time.Minute
	DefaultRequestTimeout = 2 * time.Minute
	// DefaultCasesTimeout bounds all the cases of one run together.
	DefaultCasesTimeout = 10 * time.Minute
	DefaultMaxTokens    = 1024
	DefaultPollInitial  = 250 * time.Millisecond
	DefaultPollMax      = 5 * time.Second
	// SampleRunes is how many runes of an answer a verdict shows.
	SampleRunes = 80
)

// NaNStop is the matched_stop value SGLang reports when the logits were NaN.
const NaNStop = "NaN happened"

// Config describes one run of the gate.
type Config struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:30000.
	URL string
	// Model is the model name sent with each request; empty takes ServedModel, else the
	// first id /v1/models lists.
	Model string
	// ServedModel, when set, is the name the recipe serves the model under: after
	// readiness /v1/models must list it, or the gate fails naming both (the server on the
	// port is not the recipe's).
	ServedModel string
	// ModelPath, when set, is the model the recipe's server loads: SGLang's
	// /get_model_info must report it as model_path (a server without that endpoint is not
	// asked).
	ModelPath string
	// APIKey, when set, is sent as a bearer token (SGLang's --api-key); it never appears in
	// a verdict or error.
	APIKey string
	// ReadyTimeout bounds the readiness wait; RequestTimeout each chat request.
	ReadyTimeout, RequestTimeout time.Duration
	// CasesTimeout bounds all the cases of one run together, after readiness: a server
	// that never answers costs this, not RequestTimeout for every request of every case.
	// When it runs out, the request in flight ends and the cases not run fail.
	CasesTimeout time.Duration
	// MaxTokens is each request's max_tokens.
	MaxTokens int
	// ChatTemplateKwargs is sent as chat_template_kwargs when set (e.g. enable_thinking: false).
	ChatTemplateKwargs map[string]any
	// Cases are the questions; DefaultCases when empty.
	Cases []Case
	// ReadFile reads an accuracy case's JSONL question file (default os.ReadFile); the
	// smoke step resolves names against the recipe's folder.
	ReadFile func(name string) ([]byte, error)
	// Failed, when set, is asked between readiness polls whether the service has failed
	// for good; when it has, the wait ends at once with lastLines in the verdict.
	Failed func(ctx context.Context) (failed bool, lastLines string, err error)
	// Waiting, when set, is called after every readiness poll that did not find the
	// server ready, with what the wait has seen so far (see WaitReporter).
	Waiting func(WaitStatus)
	// PollInitial and PollMax are the readiness backoff's first and longest delay.
	PollInitial, PollMax time.Duration
	// Client is the HTTP client (default: a plain client; timeouts come from the contexts).
	Client *http.Client
	// Seed draws the run's fresh content (generated questions, needle texts, the built-in
	// sweeps' numbers and phrasings, sampling seeds); 0 draws a new one. The result names
	// it, so that a run can be replayed.
	Seed uint64
	// Floors are the least speed the server must show; Baseline, when set, the figures
	// of the generation a candidate would replace, and MaxSlowdown how many times slower
	// than them the candidate may be (see Performance).
	Floors      Floors
	Baseline    *Perf
	MaxSlowdown float64
}

func (c Config) withDefaults() Config {
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.CasesTimeout <= 0 {
		c.CasesTimeout = DefaultCasesTimeout
	}
	if c.MaxTokens <= 0 {
		c.MaxTokens = DefaultMaxTokens
	}
	if len(c.Cases) == 0 {
		c.Cases = DefaultCases()
	}
	if c.PollInitial <= 0 {
		c.PollInitial = DefaultPollInitial
	}
	if c.PollMax <= 0 {
		c.PollMax = DefaultPollMax
	}
	if c.PollMax < c.PollInitial {
		c.PollMax = c.PollInitial
	}
	if c.Client == nil {
		// Load and accuracy cases hold many requests at once: keep their connections.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = MaxConcurrency
		c.Client = &http.Client{Transport: tr}
	}
	if c.ReadFile == nil {
		c.ReadFile = os.ReadFile
	}
	if c.Seed == 0 {
		c.Seed = NewSeed()
	}
	c.URL = strings.TrimRight(c.URL, "/")
	return c
}

// Validate checks the config: a URL with a scheme and host, cases with a name, a prompt
// and a valid regex.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("url %q: want http(s)://host:port", RedactURL(c.URL))
	}
	seen := map[string]bool{}
	for i, k := range c.Cases {
		if k.Name == "" {
			return fmt.Errorf("case %d: name is empty", i+1)
		}
		if seen[k.Name] {
			return fmt.Errorf("case %q: name used twice", k.Name)
		}
		seen[k.Name] = true
		if err := k.validate(); err != nil {
			return fmt.Errorf("case %q: %w", k.Name, err)
		}
	}
	return nil
}

// RedactURL returns u with any user information removed, for messages.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return u
	}
	p.User = nil
	return p.String()
}

// DetailKey is the key under which a smoke step puts the gate's *Result in its report
// details; ResultOf reads it back.
const DetailKey = "smoke"

// ResultOf returns the gate's result from a step's report details (those of a smoke step
// that ran in this process); ok is false when they hold none.
func ResultOf(details map[string]any) (res *Result, ok bool) {
	res, ok = details[DetailKey].(*Result)
	return res, ok && res != nil
}

// Result is the verdict of one run of the gate.
type Result struct {
	// URL is the server's URL without user information.
	URL string `json:"url"`
	// Model is the model the cases were sent to.
	Model string `json:"model,omitempty"`
	// Pass is true when the server got ready and every case passed.
	Pass bool `json:"pass"`
	// Reason says why the gate failed before or besides its cases (not ready, no model).
	Reason string `json:"reason,omitempty"`
	// Ready is true when the server got ready; TimeToReady is how long that took.
	Ready       bool          `json:"ready"`
	TimeToReady time.Duration `json:"-"`
	// Cases are the verdicts, in order.
	Cases []CaseResult `json:"cases"`
	// Seed is the run's seed: SGLPROV_SMOKE_SEED (or --seed) set to it sends the same
	// prompts again.
	Seed uint64 `json:"seed"`
	// Perf are the run's speed figures (nil when no answer gave one).
	Perf *Perf `json:"perf,omitempty"`
}

// MarshalJSON encodes the result with TimeToReady as "time_to_ready" and "time_to_ready_ms".
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	return json.Marshal(struct {
		plain
		TimeToReady   string `json:"time_to_ready"`
		TimeToReadyMS int64  `json:"time_to_ready_ms"`
	}{plain(r), r.TimeToReady.Round(time.Millisecond).String(), r.TimeToReady.Milliseconds()})
}

// Summary returns one line: the verdict, and the failures when there are any.
func (r *Result) Summary() string {
	if r.Pass {
		return fmt.Sprintf("PASS: %d/%d cases passed (model %s, ready in %s)",
			len(r.Cases), len(r.Cases), r.Model, r.TimeToReady.Round(time.Millisecond))
	}
	var parts []string
	if r.Reason != "" {
		parts = append(parts, r.Reason)
	}
	passed := 0
	for _, c := range r.Cases {
		if c.Pass {
			passed++
			continue
		}
		parts = append(parts, c.Name+": "+c.Reason)
	}
	head := "FAIL"
	if len(r.Cases) > 0 {
		head = fmt.Sprintf("FAIL: %d/%d cases passed", passed, len(r.Cases))
	}
	if len(parts) == 0 {
		return head
	}
	return head + ": " + strings.Join(parts, "; ")
}

// Run runs the gate: it waits for readiness, finds the model, and runs every case. Gate
// failures are in the result (Pass false); the error is for an invalid config or an
// accuracy case's question file that cannot be read or parsed.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Question files are read before the wait: a missing one is bad input, not a verdict.
	sets := map[string][]Question{}
	for _, k := range cfg.Cases {
		if k.Accuracy == nil {
			continue
		}
		qs, err := loadQuestions(k.Accuracy.Questions, cfg.ReadFile, cfg.Seed)
		if err != nil {
			return nil, fmt.Errorf("case %q: %w", k.Name, err)
		}
		sets[k.Name] = qs
	}
	res := &Result{URL: RedactURL(cfg.URL), Model: cfg.Model, Cases: []CaseResult{}, Seed: cfg.Seed}
	ttr, err := WaitReady(ctx, cfg)
	res.TimeToReady = ttr
	if err != nil {
		res.Reason = err.Error()
		return res, nil
	}
	res.Ready = true
	if reason := ownServer(ctx, cfg, res); reason != "" {
		res.Reason = reason
		if cfg.APIKey != "" {
			res.Reason = strings.ReplaceAll(res.Reason, cfg.APIKey, "[redacted]")
		}
		return res, nil
	}
	res.Pass = true
	// One budget for all the cases: each request ends at its own timeout or at the
	// budget's end, whichever comes first.
	budget := casesBudget(cfg.CasesTimeout)
	cctx, cancel := context.WithTimeoutCause(ctx, cfg.CasesTimeout, budget)
	defer cancel()
	for _, k := range cfg.Cases {
		if errors.Is(context.Cause(cctx), budget) {
			res.Pass = false
			res.Cases = append(res.Cases, CaseResult{Name: k.Name, Kind: k.Kind(),
				Reason: "not run: " + budget.Error()})
			continue
		}
		cr := runCase(cctx, cfg, res.Model, k, sets[k.Name])
		if cfg.APIKey != "" {
			cr.redact(cfg.APIKey)
		}
		res.Pass = res.Pass && cr.Pass
		res.Cases = append(res.Cases, cr)
	}
	res.Perf = perfOf(res.Cases)
	if cr, judged := performance(cfg, res.Perf); judged {
		res.Pass = res.Pass && cr.Pass
		res.Cases = append(res.Cases, cr)
	}
	return res, nil
}

// casesBudget is the cause of a run's cases context when CasesTimeout ran out.
type casesBudget time.Duration

func (b casesBudget) Error() string {
	return fmt.Sprintf("the cases' time budget (cases_timeout %s) was spent", time.Duration(b))
}

func auth(req *http.Request, cfg Config) {
	if cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.APIKey)
	}
}

// shortErr describes a transport error without the request line Go's url.Error adds.
func shortErr(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	return RedactErr(err)
}

// RedactErr returns err's text without the URL a url.Error names (it may hold a key): a
// URL parse error's reason, a request's transport error.
func RedactErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// ownServer checks that the server that got ready is the recipe's: /v1/models lists the
// served model name and /get_model_info reports the model path, when the config names
// them. It fills res.Model (the name sent with each request) and returns why the server
// is not the recipe's, or "".
func ownServer(ctx context.Context, cfg Config, res *Result) string {
	if res.Model == "" || cfg.ServedModel != "" {
		ids, err := ListModels(ctx, cfg)
		if err != nil {
			return err.Error()
		}
		if len(ids) == 0 {
			return "asking /v1/models: no model served"
		}
		if cfg.ServedModel != "" && !slices.Contains(ids, cfg.ServedModel) {
			return fmt.Sprintf("the server at %s serves %s (/v1/models), not the recipe's %q: another server holds the port, or the unit's --served-model-name differs",
				RedactURL(cfg.URL), quoteList(ids), cfg.ServedModel)
		}
		if res.Model == "" {
			res.Model = cmp.Or(cfg.ServedModel, ids[0])
		}
	}
	if cfg.ModelPath != "" {
		path, found, err := ModelInfoPath(ctx, cfg)
		if err != nil {
			return err.Error()
		}
		if found && !samePath(path, cfg.ModelPath) {
			return fmt.Sprintf("the server at %s loaded model_path %q (/get_model_info), not the recipe's %q: another server holds the port",
				RedactURL(cfg.URL), path, cfg.ModelPath)
		}
	}
	return ""
}

func quoteList(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = strconv.Quote(id)
	}
	return strings.Join(q, ", ")
}

// samePath compares model paths as SGLang was given them: absolute paths after cleaning,
// anything else (a hub repository id) as written.
func samePath(a, b string) bool {
	if filepath.IsAbs(a) && filepath.IsAbs(b) {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return a == b
}

// getJSON asks path and decodes its JSON answer into v (at most 1 MiB is read). found is
// false when the server answers 404.
func getJSON(ctx context.Context, cfg Config, path string, v any) (found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL+path, nil)
	if err != nil {
		return false, fmt.Errorf("asking %s: %w", path, err)
	}
	auth(req, cfg)
	resp, err := cfg.Client.Do(req)
	if err != nil {
		return false, fmt.Errorf("asking %s: %s", path, shortErr(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode == http.StatusNotFound {
		return false, nil
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("asking %s: HTTP %d: %s", path, resp.StatusCode, Sample(string(body), SampleRunes))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return false, fmt.Errorf("asking %s: answer is not JSON: %s", path, Sample(string(body), SampleRunes))
	}
	return true, nil
}

// ListModels asks /v1/models for the ids of the served models.
func ListModels(ctx context.Context, cfg Config) ([]string, error) {
	cfg = cfg.withDefaults()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	found, err := getJSON(ctx, cfg, "/v1/models", &list)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errors.New("asking /v1/models: HTTP 404: the server has no OpenAI model list")
	}
	var ids []string
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	return ids, nil
}

// ModelInfoPath asks SGLang's /get_model_info for the model_path the server loaded; found
// is false when the server has no such endpoint (404).
func ModelInfoPath(ctx context.Context, cfg Config) (path string, found bool, err error) {
	cfg = cfg.withDefaults()
	var info struct {
		ModelPath *string `json:"model_path"`
	}
	found, err = getJSON(ctx, cfg, "/get_model_info", &info)
	if err != nil || !found {
		return "", found, err
	}
	if info.ModelPath == nil {
		return "", false, errors.New("asking /get_model_info: the answer has no model_path")
	}
	return *info.ModelPath, true, nil
}
