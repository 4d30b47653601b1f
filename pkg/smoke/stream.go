// Decoding a streamed answer: server-sent events, each a chunk of the answer, joined into
// the same bounded texts as an answer sent whole, the stream's own shape judged.

package smoke

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
	content := &keeper{headMax: KeepHeadBytes, tailMax: KeepTailBytes}
	reasoning := &keeper{headMax: KeepHeadBytes, tailMax: KeepTailBytes}
	events, finals := 0, 0
	done := false
	shape := func(msg string) {
		if resp.shapeErr == "" {
			resp.shapeErr = msg
		}
	}
	for {
		line, rerr := readLine(br)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			if errors.Is(rerr, errAnswerTooLarge) {
				return resp, ttft, errAnswerTooLarge
			}
			return resp, ttft, fmt.Errorf("reading the stream: %s", shortErr(rerr))
		}
		line = bytes.TrimRight(line, "\r")
		if len(line) > 0 && line[0] != ':' {
			payload, ok := bytes.CutPrefix(line, []byte("data:"))
			payload = bytes.TrimSpace(payload)
			switch {
			case !ok:
				// event:, id: and retry: lines carry nothing the gate needs.
			case done:
				shape(fmt.Sprintf("the stream went on after data: [DONE]: %s", Sample(string(payload), SampleRunes)))
			case string(payload) == "[DONE]":
				done = true
			default:
				events++
				var chunk chatResponse
				j := &jsonReader{br: bufio.NewReader(bytes.NewReader(payload))}
				if derr := j.decodeTop(&chunk); derr != nil {
					shape(fmt.Sprintf("stream event %d is not JSON: %s", events, Sample(string(payload), SampleRunes)))
					break
				}
				if chunk.shapeErr != "" {
					shape(fmt.Sprintf("stream event %d: %s", events, chunk.shapeErr))
				}
				resp.choices = max(resp.choices, chunk.choices)
				if ttft == 0 && (!chunk.content.blank() || !chunk.reasoning.blank()) {
					ttft = time.Since(start)
				}
				content.write([]byte(chunk.content.head))
				reasoning.write([]byte(chunk.reasoning.head))
				if chunk.finish != "" {
					finals++
					if finals == 1 {
						resp.finish = chunk.finish
					}
				} else if finals > 0 && !chunk.content.blank() {
					shape(fmt.Sprintf("stream event %d carries text after the final chunk (finish_reason %s)", events, resp.finish))
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
		}
		if rerr != nil {
			break
		}
	}
	resp.content, resp.reasoning = content.text(), reasoning.text()
	switch {
	case events == 0 && resp.shapeErr == "":
		shape("the stream carried no event (want data: chunks ending with data: [DONE])")
	case finals == 0:
		shape(fmt.Sprintf("the stream's %d events have no final chunk (none sets finish_reason)", events))
	case finals > 1:
		shape(fmt.Sprintf("the stream has %d final chunks (finish_reason set), want exactly one", finals))
	case !done:
		shape("the stream ended without data: [DONE]")
	}
	return resp, ttft, nil
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
