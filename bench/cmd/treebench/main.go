// Command treebench packs a folder tree into treepack layers and unpacks them into a new
// folder, as a pushing node and a pulling node do with a kernel cache or a Python
// environment, without a registry (the layers are read from a folder: digests and safety
// checks as from the registry). It prints one JSON line per verb with the tree's stats and
// the seconds taken.
//
//	treebench pack TREE LAYERS-DIR
//	treebench unpack LAYERS-DIR DEST
//
// TREEBENCH_WRITERS sets the unpack's writers (treepack.UnpackOptions.Writers).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/treepack"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "treebench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: treebench pack TREE LAYERS-DIR | unpack LAYERS-DIR DEST")
	}
	ctx := context.Background()
	start := time.Now()
	switch args[0] {
	case "pack":
		layers, st, err := treepack.Pack(ctx, args[1], args[2], treepack.PackOptions{})
		if err != nil {
			return err
		}
		b, err := json.MarshalIndent(layers, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(args[2], "layers.json"), b, 0o644); err != nil {
			return err
		}
		return report("pack", st, len(layers), time.Since(start))
	case "unpack":
		b, err := os.ReadFile(filepath.Join(args[1], "layers.json"))
		if err != nil {
			return err
		}
		var layers []cache.File
		if err := json.Unmarshal(b, &layers); err != nil {
			return err
		}
		var opt treepack.UnpackOptions
		if v := os.Getenv("TREEBENCH_WRITERS"); v != "" {
			if opt.Writers, err = strconv.Atoi(v); err != nil {
				return fmt.Errorf("TREEBENCH_WRITERS=%s: %w", v, err)
			}
		}
		st, err := treepack.Unpack(ctx, treepack.Dir(args[1]), layers, args[2], opt)
		if err != nil {
			return err
		}
		return report("unpack", st, len(layers), time.Since(start))
	}
	return fmt.Errorf("unknown verb %q", args[0])
}

func report(verb string, st treepack.Stats, layers int, d time.Duration) error {
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"verb": verb, "files": st.Files, "dirs": st.Dirs, "links": st.Links, "bytes": st.Bytes, "layers": layers, "seconds": d.Seconds()})
}
