package fakehub

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// refuse answers a request without access to the repository as the real hub does, and
// reports whether it did. gate is set for resolve (and for every endpoint of a private
// repository).
func (h *Hub) refuse(w http.ResponseWriter, r *http.Request, gate bool) bool {
	if h.opt.Token == "" || !gate {
		return false
	}
	auth := r.Header.Get("Authorization")
	if auth == "Bearer "+h.opt.Token {
		return false
	}
	if !strings.HasPrefix(auth, "Bearer ") {
		// Not a token (Basic credentials of a URL's user:password): anonymous.
		auth = ""
	}
	repo := h.opt.Repo
	denied := false
	for _, t := range h.opt.DeniedTokens {
		if auth == "Bearer "+t {
			denied = true
		}
	}
	switch {
	case auth != "" && !denied:
		hubError(w, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
	case h.opt.Private:
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository Not Found for url: "+r.URL.String()+". Please make sure you specified the correct repo_id and repo_type. If you are trying to access a private or gated repo, make sure you are authenticated.")
	case denied:
		hubError(w, http.StatusForbidden, "GatedRepo", "Access to model "+repo+" is restricted and you are not in the authorized list. Visit https://huggingface.co/"+repo+" to ask for access.")
	default:
		hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+repo+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
	}
	return true
}

// serveHub serves the hub's API (revision and tree of the repository) and resolve
// requests, or a bad redirect when Options.Redirect asks one.
func (h *Hub) serveHub(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	repo := h.opt.Repo
	switch h.opt.Redirect {
	case "file":
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
		return
	case "loop":
		http.Redirect(w, r, r.URL.RequestURI(), http.StatusFound)
		return
	}
	switch {
	case strings.HasPrefix(p, "/api/models/"):
		h.serveAPI(w, r, strings.TrimPrefix(p, "/api/models/"))
	case strings.HasPrefix(p, "/"+repo+"/resolve/"):
		h.serveResolve(w, r, strings.TrimPrefix(p, "/"+repo+"/resolve/"))
	default:
		hubError(w, http.StatusNotFound, "", "not found")
	}
}

// serveAPI serves /api/models/{rest}: the repository's revision info or tree.
func (h *Hub) serveAPI(w http.ResponseWriter, r *http.Request, rest string) {
	h.apiRequests.Add(1)
	repo := h.opt.Repo
	if !strings.HasPrefix(rest, repo+"/") {
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository Not Found for url: "+r.URL.String()+". Please make sure you specified the correct repo_id and repo_type. If you are trying to access a private or gated repo, make sure you are authenticated.")
		return
	}
	if h.refuse(w, r, h.opt.Private) {
		return
	}
	rest = strings.TrimPrefix(rest, repo+"/")
	kind, rev, _ := strings.Cut(rest, "/")
	rev, err := url.PathUnescape(rev)
	if err != nil {
		hubError(w, http.StatusBadRequest, "", "bad revision")
		return
	}
	commit, ok := h.resolveRev(rev)
	if !ok {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	switch kind {
	case "revision":
		h.serveInfo(w, commit)
	case "tree":
		if h.opt.NoTree {
			hubError(w, http.StatusNotFound, "", "Not Found")
			return
		}
		h.serveTree(w, r, rev)
	default:
		hubError(w, http.StatusNotFound, "", "not found")
	}
}

// serveResolve serves /{repo}/resolve/{rest}: a file of a revision, or a signed redirect
// to the CDN for a large one; rate limited when RateLimit asks it.
func (h *Hub) serveResolve(w http.ResponseWriter, r *http.Request, rest string) {
	h.fileRequests.Add(1)
	if h.rateLimited.Add(-1) >= 0 {
		// As the real hub limits resolvers over 5-minute windows.
		w.Header().Set("Retry-After", "1")
		w.Header().Set("RateLimit", `"resolvers";r=0;t=1`)
		w.Header().Set("RateLimit-Policy", `"fixed window";"resolvers";q=3000;w=300`)
		hubError(w, http.StatusTooManyRequests, "", "You have been rate-limited; you can retry this action in about 1 second.")
		return
	}
	if h.refuse(w, r, true) {
		return
	}
	rev, name, _ := strings.Cut(rest, "/")
	rev, err1 := url.PathUnescape(rev)
	name, err2 := url.PathUnescape(name)
	if err1 != nil || err2 != nil {
		hubError(w, http.StatusBadRequest, "", "bad path")
		return
	}
	commit, ok := h.resolveRev(rev)
	if !ok {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	h.mu.Lock()
	fi, ok := h.files[name]
	cdn := h.cdnBase
	h.mu.Unlock()
	if !ok {
		hubError(w, http.StatusNotFound, "EntryNotFound", name+" does not exist on "+rev)
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if fi.size >= h.opt.LFSThreshold && cdn != "" {
		w.Header().Set("X-Linked-Etag", `"`+fi.sha256+`"`)
		w.Header().Set("X-Linked-Size", strconv.FormatInt(fi.size, 10))
		expires := strconv.FormatInt(time.Now().Add(h.opt.SignedURLTTL).UnixMilli(), 10)
		http.Redirect(w, r, cdn+"/cdn/"+fi.sha256+"?name="+url.QueryEscape(path.Base(name))+
			"&Expires="+expires+"&Signature="+h.sign(fi.sha256, expires), http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+fi.sha1+`"`)
	h.serveFile(w, r, name)
}

func (h *Hub) resolveRev(rev string) (string, bool) {
	if rev == h.opt.Commit {
		return rev, true
	}
	c, ok := h.opt.Refs[rev]
	return c, ok
}

func (h *Hub) serveInfo(w http.ResponseWriter, commit string) {
	h.mu.Lock()
	var siblings []map[string]string
	for _, p := range h.paths {
		siblings = append(siblings, map[string]string{"rfilename": p})
	}
	h.mu.Unlock()
	var gated any = false
	if h.opt.Token != "" && !h.opt.Private {
		gated = "manual"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"_id": "fake", "id": h.opt.Repo, "modelId": h.opt.Repo, "sha": commit,
		"private": h.opt.Private, "gated": gated, "siblings": siblings,
		"lastModified": time.Unix(0, 0).UTC().Format(time.RFC3339),
	})
}

func (h *Hub) listing() []Entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	type item struct {
		p string
		e Entry
	}
	var items []item
	for _, d := range h.dirs {
		items = append(items, item{d, Entry{Type: "directory", OID: GitBlobSHA1([]byte(d)), Path: d}})
	}
	for _, p := range h.paths {
		fi := h.files[p]
		e := Entry{Type: "file", OID: fi.sha1, Size: fi.size, Path: p}
		if fi.size >= h.opt.LFSThreshold {
			ptr := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", fi.sha256, fi.size)
			e.OID = GitBlobSHA1([]byte(ptr))
			e.LFS = &LFS{OID: fi.sha256, Size: fi.size, PointerSize: int64(len(ptr))}
		}
		items = append(items, item{p, e})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].p < items[j].p })
	out := make([]Entry, 0, len(items)+len(h.opt.ExtraListing))
	for _, it := range items {
		out = append(out, it.e)
	}
	return append(out, h.opt.ExtraListing...)
}

func (h *Hub) serveTree(w http.ResponseWriter, r *http.Request, rev string) {
	all := h.listing()
	start := 0
	if c := r.URL.Query().Get("cursor"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 || (n > len(all) && !h.opt.EndlessPages) {
			hubError(w, http.StatusBadRequest, "", "bad cursor")
			return
		}
		start = n
	}
	size := h.opt.PageSize
	if r.URL.Query().Get("expand") == "true" {
		// The real hub adds each entry's last commit and security scan status to an
		// expanded listing, and pages it 50 entries at a time.
		size = h.opt.ExpandPageSize
	}
	end := min(start+size, len(all))
	page := []Entry{}
	if start < len(all) {
		page = all[start:end]
	}
	h.treePages.Add(1)
	if h.opt.EndlessPages && end <= start {
		end = start + 1
	}
	if end < len(all) || h.opt.EndlessPages {
		q := r.URL.Query()
		q.Set("cursor", strconv.Itoa(end))
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		next := &url.URL{Scheme: scheme, Host: r.Host, Path: r.URL.Path, RawQuery: q.Encode()}
		if h.opt.NextHost != "" {
			next.Host = h.opt.NextHost
		}
		w.Header().Set("Link", "<"+next.String()+`>; rel="next"`)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(page)
}

func (h *Hub) serveCDN(w http.ResponseWriter, r *http.Request) {
	h.fileRequests.Add(1)
	if a := r.Header.Get("Authorization"); a != "" {
		h.mu.Lock()
		h.authSeen = append(h.authSeen, a)
		h.mu.Unlock()
	}
	sum := strings.TrimPrefix(r.URL.Path, "/cdn/")
	q := r.URL.Query()
	exp, err := strconv.ParseInt(q.Get("Expires"), 10, 64)
	if err != nil || q.Get("Signature") != h.sign(sum, q.Get("Expires")) {
		http.Error(w, "<Error><Code>AccessDenied</Code><Message>Invalid signature</Message></Error>", http.StatusForbidden)
		return
	}
	if time.Now().UnixMilli() > exp {
		h.expired.Add(1)
		http.Error(w, "<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>", http.StatusForbidden)
		return
	}
	h.mu.Lock()
	name := ""
	for _, p := range h.paths {
		if h.files[p].sha256 == sum {
			name = p
			break
		}
	}
	h.mu.Unlock()
	if name == "" {
		http.Error(w, "no such object", http.StatusNotFound)
		return
	}
	w.Header().Set("ETag", `"`+sum+`"`)
	h.serveFile(w, r, name)
}

// sign returns the signature of a CDN URL (an HMAC over the object and the expiry, keyed
// by the commit: a stand-in for the CDN's key).
func (h *Hub) sign(sum, expires string) string {
	m := hmac.New(sha256.New, []byte(h.opt.Commit))
	m.Write([]byte(sum + "\x00" + expires))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// countingWriter counts the body bytes written.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(n))
	return n, err
}

func (h *Hub) serveFile(w http.ResponseWriter, r *http.Request, name string) {
	f, err := h.opt.FS.Open(name)
	if err != nil {
		http.Error(w, "opening file", http.StatusInternalServerError)
		return
	}
	defer f.Close()
	rs, ok := f.(io.ReadSeeker)
	if !ok {
		http.Error(w, "file set does not support seeking", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Accept-Ranges", "bytes")
	var out http.ResponseWriter = countingWriter{w, &h.bytesServed}
	if h.opt.Rate > 0 {
		out = &throttledWriter{ResponseWriter: out, rate: h.opt.Rate, start: time.Now()}
	}
	http.ServeContent(out, r, "", time.Time{}, rs)
}

// throttledWriter writes at most rate bytes per second since start.
type throttledWriter struct {
	http.ResponseWriter
	rate  int64
	start time.Time
	n     int64
}

func (t *throttledWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		k := min(len(b), 32<<10)
		// The chunk leaves no earlier than the rate allows for the bytes up to its end.
		if d := time.Duration(float64(t.n+int64(k))/float64(t.rate)*float64(time.Second)) - time.Since(t.start); d > 0 {
			time.Sleep(d)
		}
		n, err := t.ResponseWriter.Write(b[:k])
		written += n
		t.n += int64(n)
		if err != nil {
			return written, err
		}
		b = b[k:]
	}
	return written, nil
}
