// amp_ram: the one memory every kernel keeps its per-tag rows, parts and weights in.
// Hand-written and shared by every generated design.
//
// 2**AW words of W bits, one write port and one synchronous read port (read-first: a read and a
// write of one address in one cycle return the old word), no reset on the array: the shape that
// Yosys and Vivado map to block RAM (or LUT-RAM when small). A kernel that needs word `a` in cycle
// t presents `a` with `re` in cycle t-1.
//
// On a board with UltraRAM (amp_pkg::USE_URAM) a memory that fills its URAM288 blocks well
// (amp_hls/memories.py: the same integer rule) is marked ram_style "ultra"; one of at most
// amp_pkg::LUTRAM_DEPTH words (0: none), not in URAM, ram_style "distributed" (LUT-RAM instead of
// a block RAM it would fill a quarter); on a board without URAM, any other of at least
// amp_pkg::BLOCK_MIN_BITS, ram_style "block" (block RAM where Yosys' cost rule would spend LUTs on
// a wide shallow one); the behaviour is the same.
module amp_ram #(
    parameter integer W = 64,  // bits per word
    parameter integer AW = 4   // address bits: 2**AW words; at least 1
) (
    input  wire          ap_clk,
    input  wire          we,
    input  wire [AW-1:0] waddr,
    input  wire [W-1:0]  wdata,
    input  wire          re,
    input  wire [AW-1:0] raddr,
    output reg  [W-1:0]  rdata
);
  localparam integer URAMS = ((W + amp_pkg::URAM_WORD_BITS - 1) / amp_pkg::URAM_WORD_BITS) *
                             (((1 << AW) + amp_pkg::URAM_WORDS - 1) / amp_pkg::URAM_WORDS);
  localparam integer ULTRA = (amp_pkg::USE_URAM != 0 &&
                             (W * (1 << AW) / URAMS) * 1000 >= amp_pkg::URAM_MIN_FILL_PERMILLE * amp_pkg::URAM_BLOCK_BITS) ? 1 : 0;
  localparam integer DISTRIBUTED = (ULTRA == 0 && (1 << AW) <= amp_pkg::LUTRAM_DEPTH) ? 1 : 0;
  localparam integer BLOCK = (amp_pkg::USE_URAM == 0 && DISTRIBUTED == 0 && W * (1 << AW) >= amp_pkg::BLOCK_MIN_BITS) ? 1 : 0;

  generate
    if (ULTRA != 0) begin : g_uram
      (* ram_style = "ultra" *) reg [W-1:0] mem [0:(1 << AW) - 1];
      always @(posedge ap_clk) begin
        if (we) mem[waddr] <= wdata;
        if (re) rdata <= mem[raddr];
      end
    end else if (DISTRIBUTED != 0) begin : g_lutram
      (* ram_style = "distributed" *) reg [W-1:0] mem [0:(1 << AW) - 1];
      always @(posedge ap_clk) begin
        if (we) mem[waddr] <= wdata;
        if (re) rdata <= mem[raddr];
      end
    end else if (BLOCK != 0) begin : g_block
      (* ram_style = "block" *) reg [W-1:0] mem [0:(1 << AW) - 1];
      always @(posedge ap_clk) begin
        if (we) mem[waddr] <= wdata;
        if (re) rdata <= mem[raddr];
      end
    end else begin : g_ram
      reg [W-1:0] mem [0:(1 << AW) - 1];
      always @(posedge ap_clk) begin
        if (we) mem[waddr] <= wdata;
        if (re) rdata <= mem[raddr];
      end
    end
  endgenerate
endmodule
