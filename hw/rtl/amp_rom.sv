// amp_rom: a constant table read synchronously through two ports (the activation kernels'
// tanh/sigmoid tables, one ROM per two lanes of a beat). Hand-written and shared by every generated
// design.
//
// DEPTH words of W bits, initialised from INIT (entry i at bits [IW*i +: IW], of which the low W
// bits are kept; INIT comes from the generated package, e.g. amp_pkg::TANH_LUT, so the contents
// are the Python table's), two synchronous read ports a and b: `raddr_*` with `re` in cycle t-1
// gives the word in cycle t; without `re`, both hold. The shape Yosys and Vivado map to one
// block-RAM ROM (a RAMB18 serves both ports: half the block RAM of one ROM per lane), or to LUTs
// when small, instead of a mux tree. An address at or above DEPTH is never presented.
module amp_rom #(
    parameter integer W = 16,     // bits per word
    parameter integer AW = 10,    // address bits: DEPTH <= 2**AW
    parameter integer DEPTH = 1024,
    parameter integer IW = 32,    // bits per INIT entry, W <= IW
    parameter [IW*DEPTH-1:0] INIT = {IW*DEPTH{1'b0}}
) (
    input  wire          ap_clk,
    input  wire          re,
    input  wire [AW-1:0] raddr_a,
    output reg  [W-1:0]  rdata_a,
    input  wire [AW-1:0] raddr_b,
    output reg  [W-1:0]  rdata_b
);
  reg [W-1:0] mem [0:DEPTH-1];

  integer i;
  initial begin
    for (i = 0; i < DEPTH; i = i + 1) mem[i] = INIT[i*IW +: W];
  end

  always @(posedge ap_clk) begin
    if (re) begin
      rdata_a <= mem[raddr_a];
      rdata_b <= mem[raddr_b];
    end
  end
endmodule
