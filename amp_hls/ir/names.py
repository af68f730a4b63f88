"""Safe identifiers: every user name reaches C++, SystemVerilog and tcl, so it must be inert there."""

from __future__ import annotations

import re

from ..errors import IRError

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_NAME_LENGTH = 48
# Prefixes the generated code uses for its own names (Vitis HLS ports, project internals; amp_top
# names the FIFO of each stream u_fifo_<stream>, so no node may be called fifo_...).
RESERVED_PREFIXES = ("ap_", "amp_", "__", "fifo_")

CPP_KEYWORDS = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class compl concept const consteval constexpr constinit const_cast continue
    co_await co_return co_yield decltype default delete do double dynamic_cast else enum explicit
    export extern false float for friend goto if inline int long mutable namespace new noexcept
    not not_eq nullptr operator or or_eq private protected public register reinterpret_cast
    requires return short signed sizeof static static_assert static_cast struct switch template
    this thread_local throw true try typedef typeid typename union unsigned using virtual void
    volatile wchar_t while xor xor_eq main NULL int8_t int16_t int32_t int64_t uint8_t uint16_t
    uint32_t uint64_t size_t std hls""".split()
)

SV_KEYWORDS = frozenset(
    """accept_on alias always always_comb always_ff always_latch and assert assign assume automatic
    before begin bind bins binsof bit break buf bufif0 bufif1 byte case casex casez cell chandle
    checker class clocking cmos config const constraint context continue cover covergroup
    coverpoint cross deassign default defparam design disable dist do edge else end endcase
    endchecker endclass endclocking endconfig endfunction endgenerate endgroup endinterface
    endmodule endpackage endprimitive endprogram endproperty endspecify endsequence endtable
    endtask enum event eventually expect export extends extern final first_match for force foreach
    forever fork forkjoin function generate genvar global highz0 highz1 if iff ifnone
    ignore_bins illegal_bins implements implies import incdir include initial inout input inside
    instance int integer interconnect interface intersect join join_any join_none large let
    liblist library local localparam logic longint macromodule matches medium modport module nand
    negedge nettype new nexttime nmos nor noshowcancelled not notif0 notif1 null or output package
    packed parameter pmos posedge primitive priority program property protected pull0 pull1
    pulldown pullup pulsestyle_ondetect pulsestyle_onevent pure rand randc randcase randsequence
    rcmos real realtime ref reg reject_on release repeat restrict return rnmos rpmos rtran
    rtranif0 rtranif1 s_always s_eventually s_nexttime s_until s_until_with scalared sequence
    shortint shortreal showcancelled signed small soft solve specify specparam static string
    strong strong0 strong1 struct super supply0 supply1 sync_accept_on sync_reject_on table
    tagged task this throughout time timeprecision timeunit tran tranif0 tranif1 tri tri0 tri1
    triand trior trireg type typedef union unique unique0 unsigned until until_with untyped use
    uwire var vectored virtual void wait wait_order wand weak weak0 weak1 while wildcard wire with
    within wor xnor xor""".split()
)

TCL_WORDS = frozenset(
    """after append array break catch cd close concat continue dict else elseif error eval exec
    exit expr file for foreach format gets glob global if incr info interp join lappend lindex
    linsert list llength lrange lreplace lsearch lset lsort namespace open proc puts pwd read
    regexp regsub rename return scan set source split string subst switch then time trace unset
    update uplevel upvar variable vwait while""".split()
)

RESERVED_WORDS = CPP_KEYWORDS | SV_KEYWORDS | TCL_WORDS

# Every device node becomes code named after it (codegen): the kernel function and module
# "k_<node>", its companions "k_<node>_reset", "k_<node>_saturations" and "k_<node>_step", the
# namespace "n_<node>" and the instance "u_<node>" in amp_top. The boundary's own code is named
# the same way after "demux", "mux", "boundary" and "control" (k_demux, k_mux_step,
# k_boundary_reset, u_control, ...). Two nodes whose generated names meet, or a node whose names
# meet the boundary's, would define one name twice (a Verilator MODDUP, a C-sim link error);
# tests/test_bounds.py checks every global name of generated projects against this scheme.
KERNEL_PREFIX = "k_"
KERNEL_SUFFIXES = ("", "_reset", "_saturations", "_step")
NAMESPACE_PREFIX = "n_"
INSTANCE_PREFIX = "u_"
BOUNDARY_NAMES = ("demux", "mux", "boundary", "control")


def generated_names(node: str) -> frozenset[str]:
    """The names generated code derives from a node called ``node`` (lower case: the
    case-insensitive file systems and tools see no more)."""
    stem = node.lower()
    return frozenset({f"{KERNEL_PREFIX}{stem}{s}" for s in KERNEL_SUFFIXES}
                     | {f"{NAMESPACE_PREFIX}{stem}", f"{INSTANCE_PREFIX}{stem}"})


BOUNDARY_GENERATED = {name: b for b in BOUNDARY_NAMES for name in generated_names(b)}


def check_generated_names(name: str, taken: dict[str, str]) -> None:
    """Refuse node ``name`` when its generated names meet the boundary's or those in ``taken``
    (generated name -> the node it came from); otherwise add its own to ``taken``."""
    mine = generated_names(name)
    for clash in sorted(mine & BOUNDARY_GENERATED.keys()):
        raise IRError(f"name {name!r} would generate {clash!r}, which the boundary "
                      f"({BOUNDARY_GENERATED[clash]!r}) generates: rename the node", node=name)
    for clash in sorted(mine & taken.keys()):
        raise IRError(f"name {name!r} would generate {clash!r}, as node {taken[clash]!r} does: "
                      "rename one of them", node=name)
    taken.update(dict.fromkeys(mine, name))


def check_identifier(name: object, what: str = "name", node: str | None = None) -> str:
    """Return ``name`` if it is safe in C++, SystemVerilog and tcl, else raise ``IRError``."""
    if not isinstance(name, str):
        raise IRError(f"{what} must be a string, got {type(name).__name__}", node=node)
    if not IDENTIFIER.match(name):
        raise IRError(
            f"{what} {name!r} is not a safe identifier (use [A-Za-z_][A-Za-z0-9_]*)", node=node
        )
    if len(name) > MAX_NAME_LENGTH:
        raise IRError(f"{what} {name!r} is longer than {MAX_NAME_LENGTH} characters", node=node)
    if name in RESERVED_WORDS or name.lower() in RESERVED_WORDS:
        raise IRError(f"{what} {name!r} is a keyword of C++, SystemVerilog or tcl", node=node)
    for prefix in RESERVED_PREFIXES:
        if name.lower().startswith(prefix):
            raise IRError(f"{what} {name!r} uses the reserved prefix {prefix!r}", node=node)
    return name
