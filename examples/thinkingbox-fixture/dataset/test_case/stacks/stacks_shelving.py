from thinkingbox.common import Judge, TestContext

"""!
scenario: stacks_maintenance
"""


def test_move_silent_spring():
    """!
    query: The environment section has moved to shelf A3. Please move Silent Spring there.
    init:
      catalog:
        golden_test_case:
          tool_interactions:
            - tool: move_book
              parameters: {book_id: B004, shelf: A3}
    tags: [shelving]
    """
    assert (
        x.effects["catalog"]["result_db_hash"] == x.effects["catalog"]["golden_db_hash"]
    )


def test_shelve_earthsea_together(x, judge):
    """!
    query: Please put all the Earthsea books on the same shelf as A Wizard of Earthsea.
    user_context: You are on the stacks team. The Earthsea books are A Wizard of Earthsea, The Tombs of Atuan and The Farthest Shore.
    init:
      catalog:
        state:
          books:
            - {id: B009, title: The Farthest Shore, author: Ursula K. Le Guin, year: 1972, shelf: C6, status: circulating, tags: [fantasy, young-adult]}
        golden_test_case:
          tool_interactions:
            - tool: move_book
              parameters: {book_id: B003, shelf: C4}
            - tool: move_book
              parameters: {book_id: B009, shelf: C4}
    tags: [shelving, init-rows]
    """
    assert (
        x.effects["catalog"]["result_db_hash"] == x.effects["catalog"]["golden_db_hash"]
    )


def test_move_withdrawn_neuromancer(x, judge):
    """!
    query: Move Neuromancer to shelf C12.
    tags: [shelving, refusal, draft]
    """
    assert (
        x.effects["catalog"]["result_db_hash"] == x.effects["catalog"]["golden_db_hash"]
    )
