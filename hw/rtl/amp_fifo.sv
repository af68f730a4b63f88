// amp_fifo: the AXI-stream FIFO on every stream between two kernels of amp_top (one per
// stream of amp_hls.design.DeviceDesign.wiring). Hand-written and shared by every generated design.
//
// 2**AW entries of {TLAST, TDATA} in a memory written and read synchronously (so it maps to
// block or distributed RAM), plus one output register: first-word-fall-through, one beat per
// cycle in and out, capacity 2**AW + 1 beats. s_TREADY depends on registers only, so no
// combinational path runs from the reader's TREADY back to the writer.
module amp_fifo #(
    parameter integer AW = 4  // address bits: 2**AW memory entries; at least 1
) (
    input  wire        ap_clk,
    input  wire        ap_rst_n,
    input  wire [63:0] s_TDATA,
    input  wire        s_TVALID,
    output wire        s_TREADY,
    input  wire        s_TLAST,
    output wire [63:0] m_TDATA,
    output wire        m_TVALID,
    input  wire        m_TREADY,
    output wire        m_TLAST
);
  reg [AW:0] wp, rp;  // one bit more than the address tells full from empty
  reg [64:0] head;  // the output register
  reg head_valid;

  wire empty = wp == rp;
  wire full = wp[AW] != rp[AW] && wp[AW-1:0] == rp[AW-1:0];
  wire push = s_TVALID && !full;
  wire pop = !empty && (!head_valid || m_TREADY);  // refill the output register

  assign s_TREADY = !full;
  assign m_TDATA = head[63:0];
  assign m_TLAST = head[64];
  assign m_TVALID = head_valid;

  // the entries: in URAM on a board with it when they fill its blocks well (the rule of amp_ram)
  localparam integer URAMS = ((65 + amp_pkg::URAM_WORD_BITS - 1) / amp_pkg::URAM_WORD_BITS) *
                             (((1 << AW) + amp_pkg::URAM_WORDS - 1) / amp_pkg::URAM_WORDS);
  localparam integer ULTRA = (amp_pkg::USE_URAM != 0 &&
                             (65 * (1 << AW) / URAMS) * 1000 >= amp_pkg::URAM_MIN_FILL_PERMILLE * amp_pkg::URAM_BLOCK_BITS) ? 1 : 0;
  generate
    if (ULTRA != 0) begin : g_uram
      (* ram_style = "ultra" *) reg [64:0] mem [0:(1 << AW) - 1];
      always @(posedge ap_clk) begin
        if (push) mem[wp[AW-1:0]] <= {s_TLAST, s_TDATA};
        if (pop) head <= mem[rp[AW-1:0]];
      end
    end else begin : g_ram
      reg [64:0] mem [0:(1 << AW) - 1];
      always @(posedge ap_clk) begin
        if (push) mem[wp[AW-1:0]] <= {s_TLAST, s_TDATA};
        if (pop) head <= mem[rp[AW-1:0]];
      end
    end
  endgenerate

  always @(posedge ap_clk) begin
    if (!ap_rst_n) begin
      wp <= {(AW + 1){1'b0}};
      rp <= {(AW + 1){1'b0}};
      head_valid <= 1'b0;
    end else begin
      if (push) wp <= wp + 1'b1;
      if (pop) rp <= rp + 1'b1;
      if (pop) head_valid <= 1'b1;
      else if (m_TREADY) head_valid <= 1'b0;
    end
  end
endmodule
