// Decoding a streamed answer: server-sent events, each a chunk of the answer, joined into
// the same bounded texts as an answer sent whole, the stream's own shape judged.

package gate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"
)

// maxEventBytes bounds one event line of a stream.
const maxEventBytes = 1 << 20

// decodeStream reads a streamed chat or completions answer: "data: {chunk}" events ended
// by "data: [DONE]". The chunks' texts are joined; ttft is the time from start to the
// first chunk carrying text. A stream whose events do not parse, that has no final chunk
// or more than one (finish_reason set), or that ends without [DONE] gets a shapeErr.
func decodeStream(r io.Reader, start time.Time) (resp chatResponse, ttft time.Duration, err error) {
	body := &limitedBody{r: r, left: MaxAnswerBytes}
	br := bufio.NewReaderSize(body, 64<<10)
	d := &streamDecoder{
		start:     start,
		content:   &keeper{headMax: KeepHeadBytes, tailMax: KeepTailBytes},
		reasoning: &keeper{headMax: KeepHeadBytes, tailMax: KeepTailBytes},
	}
	for {
		line, rerr := readLine(br)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			if errors.Is(rerr, errAnswerTooLarge) {
				return d.resp, d.ttft, errAnswerTooLarge
			}
			return d.resp, d.ttft, fmt.Errorf("reading the stream: %s", shortErr(rerr))
		}
		d.line(bytes.TrimRight(line, "\r"))
		if rerr != nil {
			break
		}
	}
	d.end()
	return d.resp, d.ttft, nil
}

// streamDecoder is the state of a stream being decoded: the answer so far, its texts'
// keepers, and the counts its shape is judged by.
type streamDecoder struct {
	start              time.Time
	resp               chatResponse
	ttft               time.Duration
	content, reasoning *keeper
	events, finals     int
	done               bool
}

// shape records the stream's first shape error.
func (d *streamDecoder) shape(msg string) {
	if d.resp.shapeErr == "" {
		d.resp.shapeErr = msg
	}
}

// line reads one line of the stream: a data: event, [DONE], or a line the gate skips.
func (d *streamDecoder) line(line []byte) {
	if len(line) == 0 || line[0] == ':' {
		return
	}
	payload, ok := bytes.CutPrefix(line, []byte("data:"))
	payload = bytes.TrimSpace(payload)
	switch {
	case !ok:
		// event:, id: and retry: lines carry nothing the gate needs.
	case d.done:
		d.shape(fmt.Sprintf("the stream went on after data: [DONE]: %s", Sample(string(payload), SampleRunes)))
	case string(payload) == "[DONE]":
		d.done = true
	default:
		d.event(payload)
	}
}

// event decodes one data: event's chunk and adds it to the answer.
func (d *streamDecoder) event(payload []byte) {
	d.events++
	var chunk chatResponse
	j := &jsonReader{br: bufio.NewReader(bytes.NewReader(payload))}
	if derr := j.decodeTop(&chunk); derr != nil {
		d.shape(fmt.Sprintf("stream event %d is not JSON: %s", d.events, Sample(string(payload), SampleRunes)))
		return
	}
	if chunk.shapeErr != "" {
		d.shape(fmt.Sprintf("stream event %d: %s", d.events, chunk.shapeErr))
	}
	resp := &d.resp
	resp.choices = max(resp.choices, chunk.choices)
	if d.ttft == 0 && (!chunk.content.blank() || !chunk.reasoning.blank()) {
		d.ttft = time.Since(d.start)
	}
	d.content.write([]byte(chunk.content.head))
	d.reasoning.write([]byte(chunk.reasoning.head))
	if chunk.finish != "" {
		d.finals++
		if d.finals == 1 {
			resp.finish = chunk.finish
		}
	} else if d.finals > 0 && !chunk.content.blank() {
		d.shape(fmt.Sprintf("stream event %d carries text after the final chunk (finish_reason %s)", d.events, resp.finish))
	}
	if chunk.matchedStop != "" {
		resp.matchedStop = chunk.matchedStop
	}
	if chunk.usage != nil {
		resp.usage = chunk.usage
	}
	if chunk.logprobs.present {
		resp.logprobs.present = true
		if resp.logprobs.bad == "" && chunk.logprobs.bad != "" {
			resp.logprobs.bad = chunk.logprobs.bad
		}
		resp.logprobs.n += chunk.logprobs.n
	}
}

// end closes the answer: its texts, and the shape error of a stream without events,
// without exactly one final chunk, or without [DONE].
func (d *streamDecoder) end() {
	d.resp.content, d.resp.reasoning = d.content.text(), d.reasoning.text()
	switch {
	case d.events == 0 && d.resp.shapeErr == "":
		d.shape("the stream carried no event (want data: chunks ending with data: [DONE])")
	case d.finals == 0:
		d.shape(fmt.Sprintf("the stream's %d events have no final chunk (none sets finish_reason)", d.events))
	case d.finals > 1:
		d.shape(fmt.Sprintf("the stream has %d final chunks (finish_reason set), want exactly one", d.finals))
	case !d.done:
		d.shape("the stream ended without data: [DONE]")
	}
}

// readLine reads one line (without its newline), at most maxEventBytes; io.EOF comes
// with the last line.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxEventBytes {
			return nil, fmt.Errorf("a stream event is longer than %d bytes", maxEventBytes)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}
