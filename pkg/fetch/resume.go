// Resume records: the part's hashed prefix and hash state, saved at checkpoints, and the
// reopening of a part left by an earlier run from bytes this run hashed itself.

package fetch

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// sidecar is the resume record NAME.part.json: how many bytes of the part are hashed, and
// the hash state after them.
type sidecar struct {
	Version int    `json:"version"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
	Hashed  int64  `json:"hashed"`
	State   []byte `json:"state"`
}

// checkpoint fsyncs the part and records the hashed prefix in the sidecar, atomically.
func (s *stream) checkpoint() error {
	j := s.j
	if j.f.SHA256 == "" || s.written == 0 {
		return nil
	}
	m, ok := s.h.sha256.(encoding.BinaryMarshaler)
	if !ok {
		return nil
	}
	if err := s.pf.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", j.part, err)
	}
	state, err := m.MarshalBinary()
	if err != nil {
		return fmt.Errorf("saving hash state of %s: %w", j.part, err)
	}
	data, err := json.Marshal(sidecar{Version: 1, Size: j.f.Size, SHA256: j.f.SHA256, Hashed: s.written, State: state})
	if err != nil {
		return fmt.Errorf("saving resume point of %s: %w", j.part, err)
	}
	tmp := j.side + ".tmp"
	if err := writeFileSync(tmp, data); err != nil {
		return err
	}
	if err := os.Rename(tmp, j.side); err != nil {
		return fmt.Errorf("saving resume point of %s: %w", j.part, err)
	}
	s.lastCk = s.written
	s.lastCkAt = time.Now()
	return nil
}

func writeFileSync(path string, data []byte) error {
	// The temporary name is fixed: what an earlier run (or anyone) left there is removed,
	// never written through.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// openPart opens the part file for this attempt. A part left by an earlier run is resumed,
// but only from bytes this run has read and hashed itself: the whole part is hashed again
// from disk (at disk speed, far faster than the network). When a resume record exists, the
// hash state after its recorded prefix must be the recorded one; a difference means the
// bytes on disk changed since they were checked, and the file starts over. It returns the
// file positioned at its end.
func (j *job) openPart(size int64) (pf *os.File, h *hashers, have int64, resumed bool, err error) {
	fresh := func() (*os.File, *hashers, int64, bool, error) {
		_ = os.Remove(j.side)
		// A part is always a new file: whatever is at its name (a symbolic link planted
		// there among them) is removed, never written through.
		if err := os.Remove(j.part); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, 0, false, fmt.Errorf("removing the old %s: %w", j.part, err)
		}
		f, err := os.OpenFile(j.part, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
		for try := 0; errors.Is(err, os.ErrNotExist) && try < 3; try++ {
			// Another Fetch into the same folder that just finished removed the
			// empty part folders: make them again.
			if err = os.MkdirAll(filepath.Dir(j.part), 0o755); err == nil {
				f, err = os.OpenFile(j.part, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
			}
		}
		if err != nil {
			return nil, nil, 0, false, fmt.Errorf("creating %s: %w", j.part, err)
		}
		return f, j.newHashers(size), 0, false, nil
	}
	if j.f.SHA256 == "" || j.noRanges {
		return fresh()
	}
	st, err := os.Lstat(j.part)
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 || (size >= 0 && st.Size() > size) {
		return fresh()
	}
	f, err := os.OpenFile(j.part, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fresh()
	}
	h = j.newHashers(size)
	var (
		recorded []byte // the hash state after the recorded prefix, to compare
		hashed   int64
	)
	if sc, ok := j.readSidecar(); ok {
		if sc.Size != size || sc.SHA256 != j.f.SHA256 {
			// The part belongs to another version of the file.
			f.Close()
			j.c.Logf("%s: the part file is of another version; starting over", j.f.Path)
			return fresh()
		}
		// A record whose state is not a sha256 state at all is a damaged record, not a
		// sign of damaged bytes: the part is then hashed and the final digest decides.
		if u, ok := sha256.New().(encoding.BinaryUnmarshaler); ok && sc.Hashed > 0 && sc.Hashed <= st.Size() && u.UnmarshalBinary(sc.State) == nil {
			recorded, hashed = sc.State, sc.Hashed
		}
	}
	j.c.Logf("%s: hashing the %s of the earlier part file", j.f.Path, FormatBytes(st.Size()))
	buf := make([]byte, 1<<20)
	if hashed > 0 {
		if _, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, hashed), buf); err != nil {
			f.Close()
			return nil, nil, 0, false, fmt.Errorf("reading %s: %w", j.part, err)
		}
		m, ok := h.sha256.(encoding.BinaryMarshaler)
		var state []byte
		if ok {
			state, _ = m.MarshalBinary()
		}
		if !bytes.Equal(state, recorded) {
			f.Close()
			j.c.Logf("%s: the first %s of the part file changed since they were checked; starting over", j.f.Path, FormatBytes(hashed))
			return fresh()
		}
	}
	if tail := st.Size() - hashed; tail > 0 {
		if _, err := io.CopyBuffer(h, io.NewSectionReader(f, hashed, tail), buf); err != nil {
			f.Close()
			return nil, nil, 0, false, fmt.Errorf("reading %s: %w", j.part, err)
		}
	}
	if _, err := f.Seek(st.Size(), io.SeekStart); err != nil {
		f.Close()
		return nil, nil, 0, false, fmt.Errorf("seeking %s: %w", j.part, err)
	}
	return f, h, st.Size(), true, nil
}

func (j *job) readSidecar() (sidecar, bool) {
	var sc sidecar
	data, err := os.ReadFile(j.side)
	if err != nil {
		return sc, false
	}
	if err := json.Unmarshal(data, &sc); err != nil || sc.Version != 1 {
		return sc, false
	}
	return sc, true
}
