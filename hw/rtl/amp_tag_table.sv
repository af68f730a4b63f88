// amp_tag_table: the tag lookup every kernel that keeps per-instance state shares (the RTL twin of
// amp::TagTable). Hand-written and shared by every generated design.
//
// SLOTS entries, each a tag of TW bits (key, state length and the state words that count) and a
// used bit. `tag` is compared with every used entry at once: `hit`/`hit_slot` name the lowest
// entry holding it, `free_slot` the lowest unused one, `full` says there is none. `insert` writes
// `tag` into `insert_slot` and marks it used; `remove` frees `remove_slot` (insert wins when
// both name one slot). Only the used bits are reset; the tags sit in a memory with one write port
// and no reset. What a kernel keeps per entry beyond the tag (rows, parts, saved inputs) lives in
// amp_ram, addressed by the slot, so the bulk of a kernel's state maps to block RAM and only the
// tags stay in flip-flops (SLOTS * TW of them).
module amp_tag_table #(
    parameter integer SLOTS = 16,
    parameter integer SB = 4,   // slot bits: 2**SB >= SLOTS, at least 1
    parameter integer TW = 96   // tag bits
) (
    input  wire          ap_clk,
    input  wire          ap_rst_n,
    input  wire [TW-1:0] tag,
    output reg           hit,
    output reg  [SB-1:0] hit_slot,
    output reg  [SB-1:0] free_slot,
    output wire          full,
    input  wire          insert,
    input  wire [SB-1:0] insert_slot,
    input  wire          remove,
    input  wire [SB-1:0] remove_slot
);
  reg [SLOTS-1:0] used;
  reg [TW-1:0] tags [0:SLOTS-1];

  assign full = &used;

  integer i;
  always @* begin
    hit = 1'b0;
    hit_slot = {SB{1'b0}};
    free_slot = {SB{1'b0}};
    for (i = SLOTS - 1; i >= 0; i = i - 1) begin  // the lowest entry wins, as in amp::TagTable
      if (used[i] && tags[i] == tag) begin
        hit = 1'b1;
        hit_slot = i[SB-1:0];
      end
      if (!used[i]) free_slot = i[SB-1:0];
    end
  end

  always @(posedge ap_clk) begin
    if (insert) tags[insert_slot] <= tag;
  end

  always @(posedge ap_clk) begin
    if (!ap_rst_n) begin
      used <= {SLOTS{1'b0}};
    end else begin
      if (remove) used[remove_slot] <= 1'b0;
      if (insert) used[insert_slot] <= 1'b1;
    end
  end
endmodule
