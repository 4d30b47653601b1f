package gpu

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// FormatTable writes the facts as an aligned table, one GPU a row (index, name, compute
// capability, memory in GiB rounded down to a tenth as Check reports it, UUID, PCI bus
// id), then the driver, CUDA and NVML versions.
func FormatTable(w io.Writer, f *Facts) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tNAME\tCC\tMEMORY (GiB)\tUUID\tPCI BUS ID")
	for _, d := range f.gpus() {
		mem := "unknown"
		if d.MemoryTotalBytes > 0 {
			mem = formatHave(d.MemoryGiB())
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", d.Index, orDash(d.Name), orDash(d.ComputeCapability), mem, orDash(d.UUID), orDash(d.PCIBusID))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing GPU table: %w", err)
	}
	var driver, nvmlVersion, source string
	if f != nil {
		driver, nvmlVersion, source = f.DriverVersion, f.NVMLVersion, f.Source
	}
	tw = tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "\nDriver:\t%s\n", orDash(driver))
	fmt.Fprintf(tw, "CUDA:\t%s\n", orDash(f.CUDAVersion()))
	fmt.Fprintf(tw, "NVML:\t%s\n", orDash(nvmlVersion))
	if source != "" && source != "nvml" {
		fmt.Fprintf(tw, "Source:\t%s\n", source)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing GPU table: %w", err)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
