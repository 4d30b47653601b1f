// Command benchcdn serves a folder over HTTP, or over TLS offering h2 and HTTP/1.1 as a CDN
// edge does, with a cap on the bytes per second of each TCP connection (as CDN edges cap a
// connection) and, optionally, one outage in the middle of the transfer: once the bytes
// served pass a mark, the server refuses connections (its port closed, every connection
// cut) or answers 503, for a while, then serves again on the same port. For bench/run.sh.
//
// It writes "URL" (https://127.0.0.1:PORT or http://...) to -addr-file once it listens, and
// with -tls the certificate (PEM) to -cert-file, for clients to trust.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchcdn:", err)
		os.Exit(1)
	}
}

type server struct {
	dir      string
	rate     int64 // bytes per second per connection; 0: none
	tlsCfg   *tls.Config
	served   atomic.Int64
	mark     int64
	outage   time.Duration
	mode     string
	started  atomic.Bool
	downTill atomic.Int64

	mu       sync.Mutex
	ln       net.Listener
	conns    map[net.Conn]bool
	addr     string
	srv      *http.Server
	accepted atomic.Int64
}

func run() error {
	dir := flag.String("dir", "", "folder to serve")
	useTLS := flag.Bool("tls", false, "serve TLS, offering h2 and http/1.1")
	rateMB := flag.Float64("conn-rate-mb", 0, "cap per TCP connection, 10^6 bytes per second (0: none)")
	addrFile := flag.String("addr-file", "", "write the base URL here once listening")
	certFile := flag.String("cert-file", "", "with -tls: write the certificate (PEM) here")
	outage := flag.Duration("outage", 0, "one outage of this long once -outage-after-mb are served (0: none)")
	afterMB := flag.Int64("outage-after-mb", 0, "MiB served before the outage begins")
	mode := flag.String("outage-mode", "refuse", "refuse (port closed, connections cut) or 503")
	flag.Parse()
	if *dir == "" || *addrFile == "" {
		return fmt.Errorf("usage: benchcdn -dir DIR -addr-file FILE [-tls -cert-file FILE] [-conn-rate-mb N] [-outage D -outage-after-mb N -outage-mode refuse|503]")
	}
	if *mode != "refuse" && *mode != "503" {
		return fmt.Errorf("-outage-mode %q: want refuse or 503", *mode)
	}
	s := &server{dir: *dir, rate: int64(*rateMB * 1e6), mark: *afterMB << 20, outage: *outage, mode: *mode, conns: map[net.Conn]bool{}}
	scheme := "http"
	if *useTLS {
		cert, pemBytes, err := selfSigned()
		if err != nil {
			return err
		}
		if err := os.WriteFile(*certFile, pemBytes, 0o644); err != nil {
			return fmt.Errorf("writing the certificate: %w", err)
		}
		s.tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
		scheme = "https"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	if err := os.WriteFile(*addrFile, []byte(scheme+"://"+s.addr), 0o644); err != nil {
		return fmt.Errorf("writing the address: %w", err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	log.Printf("benchcdn: %d connections accepted, %d MiB served", s.accepted.Load(), s.served.Load()>>20)
	return nil
}

// serve starts an http.Server on ln (TLS and h2 when configured).
func (s *server) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(s.handle), TLSConfig: s.tlsCfg,
		ReadHeaderTimeout: 30 * time.Second,
		ConnState: func(c net.Conn, st http.ConnState) {
			s.mu.Lock()
			defer s.mu.Unlock()
			switch st {
			case http.StateNew:
				s.conns[c] = true
				s.accepted.Add(1)
			case http.StateClosed, http.StateHijacked:
				delete(s.conns, c)
			}
		}}
	if s.tlsCfg != nil {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetHTTP2(true)
	}
	capped := &cappedListener{Listener: ln, rate: s.rate}
	s.mu.Lock()
	s.ln, s.srv = ln, srv
	s.mu.Unlock()
	go func() {
		var err error
		if s.tlsCfg != nil {
			err = srv.ServeTLS(capped, "", "")
		} else {
			err = srv.Serve(capped)
		}
		if err != nil && err != http.ErrServerClosed {
			log.Printf("benchcdn: %v", err)
		}
	}()
}

func (s *server) handle(w http.ResponseWriter, r *http.Request) {
	if till := s.downTill.Load(); till != 0 && time.Now().UnixNano() < till {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "outage", http.StatusServiceUnavailable)
		return
	}
	f, err := os.Open(s.dir + "/" + r.URL.Path)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	http.ServeContent(&countWriter{ResponseWriter: w, s: s}, r, "", st.ModTime(), f)
}

// countWriter counts the bytes served and starts the outage at the mark.
type countWriter struct {
	http.ResponseWriter
	s *server
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	s := c.s
	if total := s.served.Add(int64(n)); s.outage > 0 && total >= s.mark && s.started.CompareAndSwap(false, true) {
		log.Printf("benchcdn: outage (%s) for %s after %d MiB", s.mode, s.outage, total>>20)
		if s.mode == "503" {
			s.downTill.Store(time.Now().Add(s.outage).UnixNano())
		} else {
			go s.refuse()
		}
	}
	return n, err
}

// refuse closes the port and every connection for the outage, then listens again.
func (s *server) refuse() {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = srv.Shutdown(ctx) // closes the listener
	_ = srv.Close()       // and cuts every connection
	time.Sleep(s.outage)
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		log.Printf("benchcdn: listening again on %s: %v", s.addr, err)
		return
	}
	log.Printf("benchcdn: serving again")
	s.serve(ln)
}

// cappedListener caps the bytes per second written on each accepted connection.
type cappedListener struct {
	net.Listener
	rate int64
}

func (l *cappedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil || l.rate <= 0 {
		return c, err
	}
	return &cappedConn{Conn: c, rate: l.rate, start: time.Now()}, nil
}

type cappedConn struct {
	net.Conn
	rate  int64
	start time.Time
	n     int64
}

func (c *cappedConn) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		k := min(len(b), 16<<10)
		if d := time.Duration(float64(c.n+int64(k))/float64(c.rate)*float64(time.Second)) - time.Since(c.start); d > 0 {
			time.Sleep(d)
		}
		n, err := c.Conn.Write(b[:k])
		written += n
		c.n += int64(n)
		if err != nil {
			return written, err
		}
		b = b[k:]
	}
	return written, nil
}

// selfSigned makes a certificate for 127.0.0.1 and localhost.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("making a key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "benchcdn"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("making a certificate: %w", err)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pemBytes, nil
}
