// amp_rom: a constant table read synchronously (the activation kernels' tanh/sigmoid tables).
// Hand-written and shared by every generated design.
//
// DEPTH words of W bits, initialised from INIT (entry i at bits [IW*i +: IW], of which the low W
// bits are kept; INIT comes from the generated package, e.g. amp_pkg::TANH_LUT, so the contents
// are the Python table's), one synchronous read port: `raddr` with `re` in cycle t-1 gives the
// word in cycle t; without `re`, rdata holds. The shape Yosys and Vivado map to a block-RAM ROM
// (or LUT-RAM when small) instead of a mux tree. An address at or above DEPTH is never presented.
module amp_rom #(
    parameter integer W = 16,     // bits per word
    parameter integer AW = 10,    // address bits: DEPTH <= 2**AW
    parameter integer DEPTH = 1024,
    parameter integer IW = 32,    // bits per INIT entry, W <= IW
    parameter [IW*DEPTH-1:0] INIT = {IW*DEPTH{1'b0}}
) (
    input  wire          ap_clk,
    input  wire          re,
    input  wire [AW-1:0] raddr,
    output reg  [W-1:0]  rdata
);
  reg [W-1:0] mem [0:DEPTH-1];

  integer i;
  initial begin
    for (i = 0; i < DEPTH; i = i + 1) mem[i] = INIT[i*IW +: W];
  end

  always @(posedge ap_clk) begin
    if (re) rdata <= mem[raddr];
  end
endmodule
