package clidoc

import (
	"flag"
	"reflect"
	"sort"
	"strings"
)

// Describe returns fs's flags, one entry per variable (two flags that store into one
// variable are one flag with two names: -f and --recipe): the command's own flags first,
// then those common names (the flags every recipe command shares), each group by long
// name; those hidden names are left out.
func Describe(fs *flag.FlagSet, common, hidden map[string]bool) []Flag {
	byPtr := map[uintptr]*Flag{}
	var order []*Flag
	fs.VisitAll(func(f *flag.Flag) {
		if hidden[f.Name] {
			return
		}
		key := storage(f.Value)
		info := byPtr[key]
		if info == nil || key == 0 {
			name, usage := flag.UnquoteUsage(f)
			info = &Flag{ValueName: name, Usage: usage, Default: shownDefault(f)}
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				info.Bool, info.ValueName = true, ""
			} else {
				info.ValueName = valueName(info.ValueName)
			}
			order = append(order, info)
			if key != 0 {
				byPtr[key] = info
			}
		}
		if len(f.Name) == 1 && info.Short == "" {
			info.Short = f.Name
		} else if info.Long == "" {
			info.Long = f.Name
		}
		if common[f.Name] {
			info.Common = true
		}
	})
	out := make([]Flag, 0, len(order))
	for _, f := range order {
		out = append(out, *f)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Common != out[j].Common {
			return !out[i].Common
		}
		return sortName(out[i]) < sortName(out[j])
	})
	return out
}

func sortName(f Flag) string {
	if f.Long != "" {
		return f.Long
	}
	return f.Short
}

// storage returns the address a flag's value stores into: flag.Value implementations are
// pointers to (a conversion of) the variable, so two flags on one variable share it.
func storage(v flag.Value) uintptr {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return 0
	}
	return rv.Pointer()
}

// shownDefault is the default help shows: none for zero values, or when the usage text
// already says it.
func shownDefault(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "0s", "false", "[]":
		return ""
	}
	if strings.Contains(f.Usage, "(default") {
		return ""
	}
	return f.DefValue
}

// valueName turns the type names flag.UnquoteUsage gives a value into the capitals help
// uses for a value ("int" is N, "duration" DURATION).
func valueName(s string) string {
	switch s {
	case "int", "uint", "int64", "uint64":
		return "N"
	case "float":
		return "NUMBER"
	case "string", "value":
		return "VALUE"
	}
	return strings.ToUpper(s)
}
